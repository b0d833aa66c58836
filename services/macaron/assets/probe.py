"""Greedy-decoding diagnostics of a built model: how decisive and how varied its outputs are.

Tests of an engine compare its greedy tokens with a reference implementation's; that only
works when no step is a near-tie that float noise could flip. `greedy_probe` measures the
smallest top-1/top-2 logit gap over prompts x adapters x steps, next to the float noise
(the largest logit difference between a full-sequence forward and cached decoding).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import torch

PROBE_PROMPTS: tuple[str, ...] = (
    "Hello! How are you today?",
    "What is the capital of France?",
    "Write a Python function that returns the n-th Fibonacci number.",
    "Book a table for two at an Italian restaurant tomorrow at 8 pm.",
    "Make a signup form with name, email and password fields as JSON.",
    "Explain the difference between a list and a tuple.",
    "Send an email to alice@example.com saying the report is late.",
    "Tell me a joke about cats.",
    "def add(a, b):",
    '{"type": "card", "title":',
    "Translate 'good morning' into Spanish.",
    "你好，今天天气怎么样？",
    "Why does my build fail with KeyError: 'content'?",
    "Summarize: the meeting moved to Thursday at 3:30 pm.",
    "Set a reminder to call mom at 6.",
    "🎉🎉 party time! what should I bring?",
    "SELECT * FROM users WHERE",
    "A dashboard with a chart and a legend, please.",
    "Who wrote 'It was a bright cold day in April'?",
    "x",
)


@dataclass
class ProbeResult:
    """What `greedy_probe` saw: gaps, noise and the generated token ids per (variant, prompt)."""

    min_gap: float = float("inf")
    min_gap_at: tuple[str, int, int] = ("", -1, -1)  # (variant, prompt index, step)
    max_noise: float = 0.0
    logit_std: float = 0.0
    outputs: dict[str, list[list[int]]] = field(default_factory=dict)


def chat_prompt_ids(tokenizer, prompt: str) -> list[int]:  # type: ignore[no-untyped-def]
    """One user turn through the chat template, with the generation prompt."""
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
    )
    return tokenizer.encode(text, add_special_tokens=False)


@torch.no_grad()
def _greedy_batch(  # type: ignore[no-untyped-def]
    model, prompts: list[list[int]], steps: int, pad_id: int
) -> tuple[list[list[int]], torch.Tensor, float]:
    """Greedy-decodes a left-padded batch with the KV cache; returns tokens, per-step logits, noise."""
    width = max(len(ids) for ids in prompts)
    input_ids = torch.tensor([[pad_id] * (width - len(ids)) + ids for ids in prompts])
    mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in prompts])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True)
    step_logits = [out.logits[:, -1]]
    for _ in range(steps - 1):
        token = step_logits[-1].argmax(-1, keepdim=True)
        mask = torch.cat([mask, torch.ones_like(token)], dim=-1)
        positions = positions[:, -1:] + 1
        out = model(input_ids=token, attention_mask=mask, position_ids=positions, cache=out.cache, use_cache=True)
        step_logits.append(out.logits[:, -1])
    logits = torch.stack(step_logits, dim=1)  # [prompt, step, vocab]
    generated = logits.argmax(-1)
    # Float noise: the first prompt recomputed alone, unpadded, in one forward without a cache.
    alone = model(input_ids=torch.tensor([prompts[0] + generated[0, :-1].tolist()])).logits[0, -steps:]
    noise = float((alone - logits[0]).abs().max())
    return generated.tolist(), logits, noise


def _load(model_dir: Path, adapters: Mapping[str, Path]):  # type: ignore[no-untyped-def]
    """The base model with every adapter loaded under its name (PEFT), or the bare base."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    names = list(adapters)
    if not names:
        return model
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # PEFT calls a transformers API deprecated in v5
        model = PeftModel.from_pretrained(model, str(adapters[names[0]]), adapter_name=names[0]).eval()
        for name in names[1:]:
            model.load_adapter(str(adapters[name]), adapter_name=name)
    return model


def greedy_probe(
    model_dir: str | Path,
    adapters: Mapping[str, str | Path],
    prompts: Sequence[str] = PROBE_PROMPTS,
    steps: int = 16,
) -> ProbeResult:
    """Greedy-decodes every prompt with the base ("base") and each adapter, in fp32 on the CPU."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = _load(Path(model_dir), {name: Path(path) for name, path in adapters.items()})
    prompt_ids = [chat_prompt_ids(tokenizer, prompt) for prompt in prompts]
    result = ProbeResult()
    for variant in ["base", *adapters]:
        if variant != "base":
            model.set_adapter(variant)
        with model.disable_adapter() if variant == "base" and adapters else nullcontext():
            generated, logits, noise = _greedy_batch(model, prompt_ids, steps, tokenizer.pad_token_id)
        top = torch.topk(logits, 2, dim=-1).values
        gaps = (top[..., 0] - top[..., 1]).flatten()
        index = int(gaps.argmin())
        if float(gaps[index]) < result.min_gap:
            result.min_gap = float(gaps[index])
            result.min_gap_at = (variant, index // steps, index % steps)
        result.max_noise = max(result.max_noise, noise)
        result.logit_std = max(result.logit_std, float(logits.std(-1).mean()))
        result.outputs[variant] = generated
    return result
