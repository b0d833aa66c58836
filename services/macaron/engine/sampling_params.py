"""Per-request sampling parameters, with SGLang's field names, defaults and null handling.

Every field of SGLang's `SamplingParams` is accepted so SGLang's own clients work unchanged;
`null` means "use the default" and `top_k: -1` means "off", as there. What the embedded
engine does with each field (applied, or accepted and ignored) is listed in FIELD_SUPPORT;
values it cannot honour (n > 1, beam search, structural tags) are refused with a clear
message rather than silently ignored.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

TOP_K_OFF = 1 << 30
"""top_k value meaning "whole vocabulary" (SGLang's TOP_K_ALL)."""
MAX_STOP_STRINGS = 32
GREEDY_TEMPERATURE_EPS = 1e-6

FIELD_SUPPORT: dict[str, str] = {
    "max_new_tokens": "applied (1..engine max_new_tokens_limit; null = 128)",
    "stop": "applied: output ends before the first stop string (kept with no_stop_trim)",
    "stop_token_ids": "applied",
    "stop_regex": "applied on the decoded output text",
    "temperature": "applied; 0 means greedy",
    "top_p": "applied",
    "top_k": "applied; -1 means off",
    "min_p": "applied",
    "frequency_penalty": "applied",
    "presence_penalty": "applied",
    "repetition_penalty": "applied",
    "min_new_tokens": "applied (EOS and stop tokens masked until reached)",
    "n": "only 1 (several samples: send several requests)",
    "beam_width": "only null or 1",
    "json_schema": "applied (constrained decoding)",
    "regex": "applied (constrained decoding)",
    "ebnf": "applied (constrained decoding)",
    "structural_tag": "refused: not supported by the embedded engine",
    "ignore_eos": "applied",
    "skip_special_tokens": "applied when decoding text",
    "spaces_between_special_tokens": "accepted, ignored (byte-level tokenizers have no spaces to add)",
    "no_stop_trim": "applied",
    "stream_interval": "applied: tokens per streamed chunk",
    "logit_bias": "applied",
    "sampling_seed": "applied: the same seed gives the same tokens whatever else runs",
    "custom_params": "accepted, ignored (no custom logit processors)",
    "watermark": "accepted, ignored",
}


class SamplingParamsError(ValueError):
    """A sampling parameter out of range; the message names the field and the allowed range."""


class SamplingParams(BaseModel):
    """Validated sampling parameters of one request (SGLang's shape)."""

    model_config = ConfigDict(extra="forbid")

    max_new_tokens: int | None = 128
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    stop_regex: str | list[str] | None = None
    temperature: float | None = 1.0
    top_p: float | None = 1.0
    top_k: int | None = -1
    min_p: float | None = 0.0
    frequency_penalty: float | None = 0.0
    presence_penalty: float | None = 0.0
    repetition_penalty: float | None = 1.0
    min_new_tokens: int | None = 0
    n: int | None = 1
    beam_width: int | None = None
    json_schema: str | dict[str, Any] | None = None
    regex: str | None = None
    ebnf: str | None = None
    structural_tag: str | None = None
    ignore_eos: bool | None = False
    skip_special_tokens: bool | None = True
    spaces_between_special_tokens: bool | None = True
    no_stop_trim: bool | None = False
    stream_interval: int | None = None
    logit_bias: dict[str, float] | None = None
    sampling_seed: int | None = None
    custom_params: dict[str, Any] | None = None
    watermark: Any = None

    @field_validator("stop_token_ids", mode="before")
    @classmethod
    def _set_to_list(cls, value: Any) -> Any:
        if isinstance(value, (set, tuple)):
            return sorted(value)
        return value

    def normalized(self, *, max_new_tokens_limit: int, vocab_size: int) -> "SamplingParams":
        """Defaults filled for nulls, ranges checked; raises SamplingParamsError with a clear message."""
        p = self.model_copy()
        defaults = SamplingParams()
        for name in type(self).model_fields:
            if getattr(p, name) is None and getattr(defaults, name) is not None:
                setattr(p, name, getattr(defaults, name))
        if p.stop is None:
            p.stop = []
        elif isinstance(p.stop, str):
            p.stop = [p.stop]
        if isinstance(p.stop_regex, str):
            p.stop_regex = [p.stop_regex]
        if isinstance(p.json_schema, dict):
            p.json_schema = json.dumps(p.json_schema)
        p.json_schema = p.json_schema or None
        p.regex = p.regex or None
        p.ebnf = p.ebnf or None
        p.structural_tag = p.structural_tag or None
        _check(p, max_new_tokens_limit=max_new_tokens_limit, vocab_size=vocab_size)
        if p.temperature < GREEDY_TEMPERATURE_EPS:
            p.temperature, p.top_k = 1.0, 1
        if p.top_k == -1:
            p.top_k = TOP_K_OFF
        return p

    @property
    def is_greedy(self) -> bool:
        """True when the next token is always the argmax (after normalization)."""
        return self.top_k == 1

    @property
    def constraint(self) -> tuple[str, str] | None:
        """("json_schema" | "regex" | "ebnf", spec) when decoding is constrained."""
        for key in ("json_schema", "regex", "ebnf"):
            value = getattr(self, key)
            if value:
                return key, value
        return None


def _check(p: SamplingParams, *, max_new_tokens_limit: int, vocab_size: int) -> None:
    def fail(message: str) -> None:
        raise SamplingParamsError(message)

    if p.max_new_tokens < 1 or p.max_new_tokens > max_new_tokens_limit:
        fail(f"max_new_tokens must be in [1, {max_new_tokens_limit}], got {p.max_new_tokens}.")
    if not math.isfinite(p.temperature) or p.temperature < 0:
        fail(f"temperature must be a non-negative finite number, got {p.temperature}.")
    if not 0.0 < p.top_p <= 1.0:
        fail(f"top_p must be in (0, 1], got {p.top_p}.")
    if p.top_k != -1 and p.top_k < 1:
        fail(f"top_k must be -1 (off) or at least 1, got {p.top_k}.")
    if not 0.0 <= p.min_p <= 1.0:
        fail(f"min_p must be in [0, 1], got {p.min_p}.")
    for name in ("frequency_penalty", "presence_penalty"):
        if not -2.0 <= getattr(p, name) <= 2.0:
            fail(f"{name} must be in [-2, 2], got {getattr(p, name)}.")
    if not 0.0 < p.repetition_penalty <= 2.0:
        fail(f"repetition_penalty must be in (0, 2] (1.0 = none), got {p.repetition_penalty}.")
    if not 0 <= p.min_new_tokens <= p.max_new_tokens:
        fail(f"min_new_tokens must be in [0, max_new_tokens ({p.max_new_tokens})], got {p.min_new_tokens}.")
    if p.n != 1:
        fail(f"n must be 1 on this engine (send {p.n} requests instead), got {p.n}.")
    if p.beam_width not in (None, 1):
        fail(f"beam search is not supported (beam_width must be null or 1), got {p.beam_width}.")
    if p.structural_tag is not None:
        fail("structural_tag is not supported by this engine; use json_schema, regex or ebnf.")
    if len(p.stop) > MAX_STOP_STRINGS:
        fail(f"at most {MAX_STOP_STRINGS} stop strings are allowed, got {len(p.stop)}.")
    if any(not s for s in p.stop):
        fail("stop strings must be non-empty.")
    for pattern in p.stop_regex or []:
        try:
            re.compile(pattern)
        except re.error as exc:
            fail(f"stop_regex {pattern!r} is not a valid regular expression: {exc}.")
    for token_id in p.stop_token_ids or []:
        if not 0 <= token_id < vocab_size:
            fail(f"stop_token_ids must be in [0, {vocab_size - 1}], got {token_id}.")
    for key in p.logit_bias or {}:
        if not key.lstrip("-").isdigit() or not 0 <= int(key) < vocab_size:
            fail(f"logit_bias keys must be token ids in [0, {vocab_size - 1}], got {key!r}.")
    if p.stream_interval is not None and p.stream_interval < 1:
        fail(f"stream_interval must be at least 1, got {p.stream_interval}.")
    if p.sampling_seed is not None and not -(2**63) <= p.sampling_seed < 2**63:
        fail(f"sampling_seed must fit in 64 bits, got {p.sampling_seed}.")
    constraints = [k for k in ("json_schema", "regex", "ebnf", "structural_tag") if getattr(p, k)]
    if len(constraints) > 1:
        fail(f"only one of json_schema, regex, ebnf may be set, got {', '.join(constraints)}.")
    if p.json_schema:
        try:
            json.loads(p.json_schema)
        except json.JSONDecodeError as exc:
            fail(f"json_schema is not valid JSON: {exc}.")
