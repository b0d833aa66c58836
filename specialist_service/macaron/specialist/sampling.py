"""A request's sampling values + the profile's defaults and caps → the engine's sampling_params.

Values are checked, never clamped: out of range is a BadRequestError naming the field and the
allowed range. The output budget is checked against the context: prompt tokens plus
max_new_tokens above the limit is a ContextOverflowError (never silent truncation); only when
the request sets no max_new_tokens is the profile's default lowered to what fits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from macaron.specialist.errors import BadRequestError, ContextOverflowError
from macaron.specialist.settings import ProfileSettings

MAX_STOP_STRINGS = 16
MAX_STOP_LENGTH = 256


@dataclass(frozen=True, slots=True)
class SamplingRequest:
    """What a request asked for; None means "the profile's default"."""

    max_new_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    repetition_penalty: float | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    min_new_tokens: int | None = None


def _fail(message: str) -> None:
    raise BadRequestError(f"sampling.{message}")


def _check_range(name: str, value: float | None, low: float, high: float, *, low_open: bool = False) -> None:
    if value is None:
        return
    if not math.isfinite(value) or value > high or value < low or (low_open and value == low):
        bracket = "(" if low_open else "["
        _fail(f"{name} must be in {bracket}{low}, {high}], got {value}")


def resolve_sampling(
    request: SamplingRequest, profile: ProfileSettings, *, prompt_tokens: int, context_length: int
) -> dict[str, Any]:
    """The engine's sampling_params (SGLang names); raises BadRequestError / ContextOverflowError."""
    r = request
    _check_range("temperature", r.temperature, 0.0, profile.max_temperature)
    _check_range("top_p", r.top_p, 0.0, 1.0, low_open=True)
    _check_range("min_p", r.min_p, 0.0, 1.0)
    _check_range("frequency_penalty", r.frequency_penalty, -2.0, 2.0)
    _check_range("presence_penalty", r.presence_penalty, -2.0, 2.0)
    _check_range("repetition_penalty", r.repetition_penalty, 0.0, 2.0, low_open=True)
    if r.top_k is not None and r.top_k != -1 and r.top_k < 1:
        _fail(f"top_k must be -1 (off) or at least 1, got {r.top_k}")
    if len(r.stop) > MAX_STOP_STRINGS:
        _fail(f"stop has {len(r.stop)} strings; at most {MAX_STOP_STRINGS} are allowed")
    if any(not s or len(s) > MAX_STOP_LENGTH for s in r.stop):
        _fail(f"stop strings must be 1 to {MAX_STOP_LENGTH} characters long")

    room = context_length - prompt_tokens
    if r.max_new_tokens is None:
        if room < 1:
            raise ContextOverflowError(
                f"the prompt is {prompt_tokens} tokens, which fills the context limit of {context_length} tokens; "
                "shorten the conversation"
            )
        max_new_tokens = min(profile.max_new_tokens, profile.max_new_tokens_cap, room)
    else:
        if not 1 <= r.max_new_tokens <= profile.max_new_tokens_cap:
            _fail(f"max_new_tokens must be in [1, {profile.max_new_tokens_cap}], got {r.max_new_tokens}")
        if r.max_new_tokens > room:
            raise ContextOverflowError(
                f"the prompt is {prompt_tokens} tokens and max_new_tokens is {r.max_new_tokens}: "
                f"together over the context limit of {context_length} tokens; shorten the conversation "
                f"or ask for at most {max(room, 0)} new tokens"
            )
        max_new_tokens = r.max_new_tokens
    if r.min_new_tokens is not None and not 0 <= r.min_new_tokens <= max_new_tokens:
        _fail(f"min_new_tokens must be in [0, max_new_tokens={max_new_tokens}], got {r.min_new_tokens}")

    params: dict[str, Any] = {
        "max_new_tokens": max_new_tokens,
        "temperature": profile.temperature if r.temperature is None else r.temperature,
        "top_p": profile.top_p if r.top_p is None else r.top_p,
        "top_k": profile.top_k if r.top_k is None else r.top_k,
    }
    optional = {
        "min_p": r.min_p,
        "frequency_penalty": r.frequency_penalty,
        "presence_penalty": r.presence_penalty,
        "repetition_penalty": r.repetition_penalty
        if r.repetition_penalty is not None or profile.repetition_penalty == 1.0
        else profile.repetition_penalty,
        "min_new_tokens": r.min_new_tokens,
        "sampling_seed": r.seed,
    }
    params.update({k: v for k, v in optional.items() if v is not None})
    if r.stop:
        params["stop"] = list(r.stop)
    return params
