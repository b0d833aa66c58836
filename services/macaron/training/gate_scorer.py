"""The promotion gate's scorer from `adapters eval`: held-out share of good answers, over HTTP.

Plug it in with `router.lifecycle.gate_scorer: "macaron.training.gate_scorer:held_out_share"`.
Before a canary takes traffic the router scores the candidate and the stable version on the
replica that loaded it: the same held-out prompts (the routing data's dev split), rendered with
the router's tokenizer and the specialist's profile, greedy and unconstrained, through the
engine's /generate (SGLang or the embedded engine alike); the score is the share of answers with
the specialist's property (`tasks.py`). A candidate worse than stable by more than
`router.lifecycle.gate_margin` never takes traffic.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from macaron.lifecycle.gate import EvalTarget

GATE_PROMPTS = 12
GATE_TIMEOUT_S = 300.0


@functools.lru_cache(maxsize=1)
def _settings_and_tokenizer() -> tuple[Any, Any]:
    from macaron.config import load_settings
    from macaron.specialist.server import load_tokenizer

    settings = load_settings()
    return settings, load_tokenizer(settings)


async def held_out_share(target: EvalTarget) -> float:
    """Share (0..1) of good held-out answers of `target.lora_path` on `target.replica`."""
    from macaron.engine_client import AsyncEngineClient
    from macaron.training.batch import render_plan
    from macaron.training.distill import sample_prompts
    from macaron.training.tasks import MAX_NEW_TOKENS, task

    settings, tokenizer = await asyncio.to_thread(_settings_and_tokenizer)
    spec = task(target.specialist, settings.specialists.profile(target.specialist).system_prompt)
    prompts = [text for text, _ in sample_prompts(target.specialist, GATE_PROMPTS, split="dev")]
    tools = [spec.tools(text, seed=10_000 + i) for i, text in enumerate(prompts)]
    plans = [spec.student(text, t) for text, t in zip(prompts, tools)]
    sampling = {"temperature": 0, "max_new_tokens": MAX_NEW_TOKENS[target.specialist]}
    async with AsyncEngineClient(target.replica, timeout=GATE_TIMEOUT_S, max_retries=1,
                                 api_key=settings.engine.api_key_value) as engine:
        results = await asyncio.gather(*(
            engine.generate(text=render_plan(tokenizer, plan), sampling_params=sampling, lora_path=target.lora_path)
            for plan in plans
        ))
    good = sum(
        1 for result, t in zip(results, tools)
        if result.finish_reason is not None and result.finish_reason.type == "stop" and spec.good(result.text, t)
    )
    return good / max(1, len(plans))
