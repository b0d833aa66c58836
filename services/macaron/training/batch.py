"""Many generations on an in-process engine at once: the batch job behind distillation and eval.

All requests are queued together so the engine's continuous batching keeps its rows full
(one request at a time would waste most of each step). The rendered prompt is the same text a
specialist would send, built by the tokenizer's chat template.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tqdm.auto import tqdm

from macaron.engine import EngineArgs, GenerateRequest, LLMEngine, SamplingParams
from macaron.training.tasks import Plan


@dataclass(frozen=True)
class Generation:
    text: str
    finish_type: str  # "stop" | "length" | "abort"
    completion_tokens: int


def open_engine(
    model_dir: str, adapters: dict[str, str] | None = None, max_running_requests: int = 32, num_threads: int | None = None
) -> LLMEngine:
    """An engine for batch jobs: a KV budget sized for `max_running_requests` rows of ~1.5 k tokens."""
    return LLMEngine(
        EngineArgs(
            model_path=str(model_dir),
            lora_paths=[f"{name}={path}" for name, path in (adapters or {}).items()],
            max_running_requests=max_running_requests,
            max_queued_requests=1_000_000,
            max_total_tokens=max_running_requests * 1536,
            num_threads=num_threads,
        )
    )


def render_plan(tokenizer: Any, plan: Plan) -> str:
    text = tokenizer.apply_chat_template(plan.messages, tools=plan.tools, tokenize=False, add_generation_prompt=True)
    return str(text) + plan.text_prefix


def generate_all(
    engine: LLMEngine,
    plans: list[Plan],
    max_new_tokens: int | list[int],
    adapter: str | None | list[str | None] = None,
    desc: str = "generating",
    progress: bool = True,
) -> list[Generation]:
    """Greedy answers to every plan, in order; constrained where the plan says so. `max_new_tokens`
    and `adapter` are one value for all plans or one per plan."""
    limits = max_new_tokens if isinstance(max_new_tokens, list) else [max_new_tokens] * len(plans)
    adapters = adapter if isinstance(adapter, list) else [adapter] * len(plans)
    for index, plan in enumerate(plans):
        sampling = SamplingParams(temperature=0, max_new_tokens=limits[index], json_schema=plan.json_schema)
        engine.add_request(
            GenerateRequest(rid=str(index), prompt=render_plan(engine.tokenizer, plan), sampling=sampling, lora_path=adapters[index])
        )
    done: dict[int, Generation] = {}
    with tqdm(total=len(plans), desc=desc, unit="req", disable=not progress) as bar:
        tokens = 0
        while engine.has_unfinished():
            for out in engine.step():
                if out.finished:
                    done[int(out.rid)] = Generation(
                        out.text, (out.finish_reason or {}).get("type", "stop"), out.completion_tokens
                    )
                    tokens += out.completion_tokens
                    bar.update()
                    bar.set_postfix(tok_s=f"{tokens / max(bar.format_dict['elapsed'], 1e-9):.0f}")
    return [done[i] for i in range(len(plans))]
