"""A deterministic evaluation scorer over the tiny model's outputs, for the promotion gate tests.

Score = the share of greedy tokens a version generates that equal those of `code@v1` on a few
fixed prompts (v1 scores 1.0; a copy of it too; an adapter with other weights less).
"""

from __future__ import annotations

import httpx

from macaron.lifecycle.gate import EvalTarget

PROMPTS = ([5, 17, 42, 8], [100, 3, 64, 9, 12], [7, 7, 7, 1])
REFERENCE = "code@v1"
TOKENS = 8


def _tokens(replica: str, lora_path: str, prompt: list[int]) -> list[int]:
    body = {"input_ids": prompt, "lora_path": lora_path,
            "sampling_params": {"max_new_tokens": TOKENS, "min_new_tokens": TOKENS, "temperature": 0.0}}
    return httpx.post(f"{replica}/generate", json=body, timeout=30).json()["output_ids"]


def greedy_agreement(target: EvalTarget) -> float:
    same = total = 0
    for prompt in PROMPTS:
        got, ref = _tokens(target.replica, target.lora_path, prompt), _tokens(target.replica, REFERENCE, prompt)
        same += sum(a == b for a, b in zip(got, ref))
        total += max(len(got), len(ref))
    return same / max(1, total)
