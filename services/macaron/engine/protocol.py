"""The contract between the engine core and everything that serves it (HTTP server, tests).

The HTTP layer validates the wire shape, builds a GenerateRequest and calls `submit`, which
validates against the model (adapter known, prompt length, sampling ranges) and enqueues
synchronously, so a bad request is refused before any response byte is sent. The returned
RequestStream yields cumulative RequestOutputs until one is finished; leaving it early (or
calling `abort`) frees the request's compute at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Protocol

from macaron.engine.sampling_params import SamplingParams


class EngineError(Exception):
    """Base of the engine's errors; `status_code` is the HTTP status SGLang answers with."""

    status_code = 500


class InvalidRequestError(EngineError):
    """Bad input (empty prompt, unknown adapter, prompt over the context length, bad sampling values)."""

    status_code = 400


class EngineOverloadedError(EngineError):
    """The waiting queue is full; the caller should retry later."""

    status_code = 503


class EngineNotReadyError(EngineError):
    """Starting up or shutting down."""

    status_code = 503


@dataclass
class GenerateRequest:
    """One generation request as the core sees it."""

    rid: str
    prompt: str | list[int]
    """Text (tokenized by the engine, no special tokens added) or token ids."""
    sampling: SamplingParams = field(default_factory=SamplingParams)
    lora_path: str | None = None
    """Adapter name (optionally `name@version`); None is the plain base model."""
    stream: bool = False
    return_logprob: bool = False
    """Record each output token's log probability (SGLang's `return_logprob`, output tokens only)."""
    top_logprobs_num: int = 0
    """Also record the this-many most likely tokens at each output position (SGLang's `top_logprobs_num`)."""


@dataclass
class RequestOutput:
    """State of one request after a step: cumulative ids and text, and SGLang's meta_info parts."""

    rid: str
    output_ids: list[int]
    text: str
    finished: bool
    finish_reason: dict[str, Any] | None
    """SGLang's shape: {"type": "stop", "matched": id|str} | {"type": "length", "length": n} | {"type": "abort", "message": str}."""
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    e2e_latency: float
    """Seconds since the request was submitted."""
    first_token_latency: float | None = None
    """Seconds from submission to the step that sampled the first output token (stamped on the
    request itself, so it is right for non-streaming requests too); None before that."""
    output_token_logprobs: list[tuple[float, int]] | None = None
    """(logprob, token id) of every output token so far, when the request asked for logprobs."""
    output_top_logprobs: list[list[tuple[float, int]]] | None = None
    """Per output position, the top_logprobs_num most likely (logprob, token id), best first."""


class RequestStream(Protocol):
    """Async iterator of a request's outputs; closing it early aborts the request."""

    rid: str

    def __aiter__(self) -> AsyncIterator[RequestOutput]: ...

    async def abort(self) -> None: ...


@dataclass
class MemoryUsage:
    """Bytes the engine holds, by kind, as it accounts them (answers "what do four LoRAs cost?")."""

    base_weight_bytes: int
    adapter_bytes: dict[str, int]
    """Host copy of each loaded adapter (A and scaled B^T of every targeted projection)."""
    kv_cache_bytes: int
    """The preallocated paged KV cache (max_total_tokens worth)."""
    adapter_host_bytes: int = 0
    """Sum of adapter_bytes."""
    adapter_pool_bytes: int = 0
    """Device-side slot tensors the forward pass reads; 0 on CPU, where slots point at the host copies."""
    adapter_pool_bytes_on_accelerator: int = 0
    """What the slot pool holds on an accelerator with these settings: max_loras_per_batch slots x the
    largest loaded rank x every targeted module (SGLang's LoRA memory pool); the figure to plan a GPU with."""
    adapter_slots: int = 0
    kv_copy_bytes: int = 0
    """Contiguous per-request K/V copies of long-context rows, held now (they spare attention a
    gather of the paged cache every step and chunk): live copies and the spare buffers of finished
    ones, kept for reuse within kv_copy_max_bytes."""
    kv_copy_max_bytes: int = 0
    """The most those copies may hold (decode_kv_copy_tokens)."""
    packed_head_copy_bytes: int = 0
    """CPU weight packing with tied embeddings: the output projection's packed copy of the embedding
    matrix (the lookup reads the plain one); 0 otherwise."""
    device: str = "cpu"

    @property
    def total_bytes(self) -> int:
        """Everything resident on this process's devices: weights (and a packed head copy), adapters
        (host + pool), KV cache and its live contiguous copies."""
        return (
            self.base_weight_bytes + self.packed_head_copy_bytes + self.adapter_host_bytes + self.adapter_pool_bytes
            + self.kv_cache_bytes + self.kv_copy_bytes
        )


@dataclass
class EngineStats:
    """Live counters for /metrics and /server_info."""

    num_running: int
    num_queued: int
    kv_blocks_used: int
    kv_blocks_total: int
    prompt_tokens_total: int
    generation_tokens_total: int
    cached_tokens_total: int
    requests_finished_total: int
    requests_aborted_total: int


class AsyncEngine(Protocol):
    """What the HTTP server needs from the engine core."""

    tokenizer: Any
    """A transformers tokenizer (encode/decode, chat template)."""

    async def start(self) -> None: ...

    async def shutdown(self) -> None: ...

    def submit(self, request: GenerateRequest) -> RequestStream:
        """Validates and enqueues; raises InvalidRequestError / EngineOverloadedError / EngineNotReadyError."""
        ...

    async def submit_async(self, request: GenerateRequest) -> RequestStream:
        """`submit` with tokenising and grammar compilation off the event loop."""
        ...

    async def abort(self, rid: str) -> bool:
        """Aborts a running or queued request; False when no such request."""
        ...

    async def load_lora_adapter(self, name: str, path: str, pinned: bool = False) -> None:
        """Loads a PEFT adapter directory under `name`; InvalidRequestError if it cannot."""
        ...

    async def unload_lora_adapter(self, name: str) -> None:
        """Unloads `name` once no running request uses it; InvalidRequestError if unknown."""
        ...

    def loaded_adapters(self) -> dict[str, str]:
        """{name: path} of the loaded adapters."""
        ...

    def memory_usage(self) -> MemoryUsage: ...

    def stats(self) -> EngineStats: ...

    def model_info(self) -> dict[str, Any]:
        """model_path, served name, context length, vocab size, architecture."""
        ...
