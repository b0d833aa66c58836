"""OpenAI's legacy text completions (POST /v1/completions): request and response models.

A prompt is a string or a list of strings (one choice per prompt, `index` in prompt order);
token-id prompts are refused (send text). Refused with a 400 naming the field, as values that
would change the answer: `n` or `best_of` above 1, `suffix`, `logit_bias`, and `echo` together
with `logprobs` (that needs the prompt's logprobs, which are not computed). `echo` alone repeats
the prompt before the completion. `max_tokens` defaults to 16, as OpenAI's does. `logprobs`
(0 to 5, OpenAI's limit) returns the legacy logprobs object: tokens, token_logprobs,
top_logprobs (token → logprob) and text_offset. The sampling extras of vLLM's server (`top_k`,
`min_p`, `repetition_penalty`, `min_tokens`) are accepted, as on chat completions.
"""

from __future__ import annotations

import uuid
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from macaron.gateway.protocol import INT32_MAX, INT64_MAX, INT64_MIN, CompletionUsage, StreamOptions, _Strict
from macaron.sdk import MODELS

MAX_PROMPTS = 32
"""Prompts in one request: each is its own generation through the router."""
DEFAULT_MAX_TOKENS = 16
"""OpenAI's default for legacy completions."""
MAX_LOGPROBS = 5
"""OpenAI's limit for the legacy `logprobs`."""


class CompletionRequest(_Strict):
    """POST /v1/completions (OpenAI's names and ranges)."""

    model: str
    prompt: str | list[str] | list[int] | list[list[int]]
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(None, ge=1, le=INT32_MAX)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=INT64_MIN, le=INT64_MAX)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    echo: bool | None = False
    n: int | None = Field(None, ge=1)
    best_of: int | None = Field(None, ge=1)
    suffix: str | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = Field(None, max_length=256)
    # Sampling extras vLLM's and SGLang's OpenAI servers accept.
    top_k: int | None = Field(None, ge=-1, le=INT32_MAX, description="-1 (or 0) is off.")
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(None, gt=0.0, le=2.0)
    min_tokens: int | None = Field(None, ge=0, le=INT32_MAX)

    @field_validator("stop")
    @classmethod
    def _stop(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and len(value) > 4:
            raise ValueError("at most 4 stop sequences are allowed")
        return value

    @property
    def prompts(self) -> list[str]:
        """The prompts as text (call after `unsupported()` returned None)."""
        return [self.prompt] if isinstance(self.prompt, str) else [str(p) for p in self.prompt]

    def unsupported(self) -> tuple[str, str] | None:
        """(param, message) of the first value Macaron cannot honour, else None."""
        if self.model not in MODELS:
            return "model", f"The model `{self.model}` does not exist; use one of {', '.join(MODELS)}."
        if not isinstance(self.prompt, str):
            if not self.prompt:
                return "prompt", "prompt is an empty list: send a string or a list of strings."
            if not all(isinstance(p, str) for p in self.prompt):
                return "prompt", "token-id prompts are not supported: send the prompt as text."
            if len(self.prompt) > MAX_PROMPTS:
                return "prompt", f"prompt has {len(self.prompt)} entries; at most {MAX_PROMPTS} are allowed."
        if any(not p for p in self.prompts):
            return "prompt", "prompt is empty: send at least one character."
        if self.n not in (None, 1):
            return "n", "n > 1 is not supported: Macaron returns one choice per prompt."
        if self.best_of not in (None, 1):
            return "best_of", "best_of > 1 is not supported: Macaron generates one completion per prompt."
        if self.suffix:
            return "suffix", "suffix (insertion) is not supported by Macaron Serve."
        if self.logit_bias:
            return "logit_bias", "logit_bias is not supported by Macaron Serve."
        if self.echo and self.logprobs is not None:
            return "echo", "echo with logprobs needs the prompt's logprobs, which Macaron does not compute; drop one."
        if self.stream_options is not None and not self.stream:
            return "stream_options", "stream_options is only allowed when stream is true."
        return None

    @property
    def specialist(self) -> str:
        return MODELS.get(self.model) or "auto"

    @property
    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)


class LegacyLogprobs(BaseModel):
    """The completions' logprobs object (parallel lists, one entry per generated token)."""

    tokens: list[str] = Field(default_factory=list)
    token_logprobs: list[float] = Field(default_factory=list)
    top_logprobs: list[dict[str, float]] | None = None
    text_offset: list[int] = Field(default_factory=list)


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: LegacyLogprobs | None = None
    finish_reason: str | None = None


class Completion(BaseModel):
    """The whole answer, and (with stream) each SSE chunk: OpenAI uses one shape for both."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: CompletionUsage | None = None
    system_fingerprint: str | None = None


def completion_id(request_id: str) -> str:
    return f"cmpl-{request_id}" if request_id else f"cmpl-{uuid.uuid4().hex}"
