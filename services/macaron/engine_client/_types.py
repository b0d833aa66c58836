"""Typed request parameters and results of the engine API (SGLang's field names).

Results are pydantic models that keep unknown keys (`model_extra`), so a newer SGLang that
adds meta_info fields still parses, and what it added stays readable.
"""

from __future__ import annotations

from typing import Any, TypedDict

from pydantic import BaseModel, ConfigDict, Field


class SamplingParamsDict(TypedDict, total=False):
    """The sampling_params most callers set (any other SGLang field may be passed too)."""

    max_new_tokens: int
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    stop: str | list[str]
    stop_token_ids: list[int]
    frequency_penalty: float
    presence_penalty: float
    repetition_penalty: float
    json_schema: str
    regex: str
    ebnf: str
    ignore_eos: bool
    sampling_seed: int


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class FinishReason(_Open):
    """Why generation stopped: type "stop" (with `matched`), "length" (with `length`) or "abort"."""

    type: str
    matched: int | str | list[int] | None = None
    length: int | None = None
    message: str | None = None
    status_code: int | None = None


class TokenLogprob(BaseModel):
    """One output position's logprob (asked with `return_logprob`), and the top ones (`top_logprobs_num`)."""

    token_id: int
    logprob: float
    top: list[tuple[int, float]] = Field(default_factory=list)
    """(token id, logprob) of the most likely tokens at this position, best first."""


class MetaInfo(_Open):
    """SGLang's meta_info of one response or stream chunk."""

    id: str
    finish_reason: FinishReason | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    e2e_latency: float | None = None
    weight_version: str | None = None
    output_token_logprobs: list[list[Any]] | None = None
    """SGLang's (logprob, token id, text or null) per output token, with return_logprob."""
    output_top_logprobs: list[list[list[Any]] | None] | None = None

    def token_logprobs(self, last: int | None = None) -> list[TokenLogprob]:
        """The logprobs of the output tokens (only the `last` ones when given: a chunk's new tokens)."""
        tokens = self.output_token_logprobs or []
        tops = self.output_top_logprobs or []
        start = 0 if last is None else max(0, len(tokens) - last)
        out = []
        for i in range(start, len(tokens)):
            logprob, token_id = tokens[i][0], tokens[i][1]
            top = tops[i] if i < len(tops) and tops[i] else []
            out.append(TokenLogprob(token_id=int(token_id), logprob=float(logprob),
                                    top=[(int(e[1]), float(e[0])) for e in top]))
        return out


class GenerateResult(_Open):
    """The answer of a non-streaming /generate."""

    text: str
    output_ids: list[int] = Field(default_factory=list)
    meta_info: MetaInfo
    prompt_token_ids: list[int] | None = None

    @property
    def finish_reason(self) -> FinishReason | None:
        return self.meta_info.finish_reason


class StreamChunk(BaseModel):
    """One streamed event, with both the new part and everything so far, whatever the server mode."""

    text: str
    """All text generated so far."""
    delta: str
    """Text new in this chunk."""
    output_ids: list[int]
    """All token ids generated so far."""
    delta_output_ids: list[int]
    """Token ids new in this chunk."""
    meta_info: MetaInfo

    @property
    def delta_logprobs(self) -> list[TokenLogprob]:
        """Logprobs of this chunk's new tokens (empty unless asked for); SGLang's lists may be
        cumulative or incremental, and both end with the new tokens."""
        return self.meta_info.token_logprobs(last=len(self.delta_output_ids))

    @property
    def finished(self) -> bool:
        return self.meta_info.finish_reason is not None

    @property
    def finish_reason(self) -> FinishReason | None:
        return self.meta_info.finish_reason


class LoRAUpdateResult(_Open):
    """The answer of /load_lora_adapter and /unload_lora_adapter."""

    success: bool
    error_message: str | None = None
    loaded_adapters: dict[str, Any] | None = None


class ServerInfo(_Open):
    """/server_info: the server's arguments (flat, SGLang style) plus live state."""

    model_path: str | None = None
    served_model_name: str | None = None
    incremental_streaming_output: bool = False
    max_running_requests: int | None = None
    max_queued_requests: int | None = None
    loaded_adapters: dict[str, str] | None = None
    """The embedded engine's {name: path}; SGLang lists its start-up lora_paths instead."""
    memory_usage: dict[str, Any] | None = None
    """The embedded engine's bytes per part (base weights, each adapter, KV cache)."""
    internal_states: list[dict[str, Any]] = Field(default_factory=list)
    version: str | None = None


class ModelInfo(_Open):
    """/model_info."""

    model_path: str | None = None
    served_model_name: str | None = None
    is_generation: bool = True
    architectures: list[str] | None = None


class ModelCard(_Open):
    """One entry of /v1/models: the base model, or an adapter (with `parent`)."""

    id: str
    root: str | None = None
    parent: str | None = None
    max_model_len: int | None = None
