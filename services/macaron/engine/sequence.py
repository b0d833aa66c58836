"""One request's state inside the engine: tokens, KV blocks, adapter, sampling state, output text."""

from __future__ import annotations

import time
from enum import Enum, auto
from itertools import count
from typing import TYPE_CHECKING, Any

import torch

from macaron.engine.sampling_params import SamplingParams

if TYPE_CHECKING:
    from macaron.engine.detokenizer import IncrementalDetokenizer
    from macaron.engine.grammar import GrammarState
    from macaron.engine.lora_manager import LoRAAdapter


class SequenceStatus(Enum):
    WAITING = auto()
    RUNNING = auto()
    FINISHED = auto()


class Sequence:
    """A request from admission to finish; the scheduler, runner and sampler all read it."""

    _ids = count()

    def __init__(
        self,
        rid: str,
        prompt_token_ids: list[int],
        sampling: SamplingParams,
        *,
        adapter: LoRAAdapter | None,
        generator: torch.Generator,
        detokenizer: IncrementalDetokenizer,
        grammar: GrammarState | None = None,
        stream: bool = False,
        arrival_time: float | None = None,
        return_logprob: bool = False,
        top_logprobs_num: int = 0,
    ) -> None:
        self.seq_id = next(Sequence._ids)
        self.rid = rid
        self.token_ids: list[int] = list(prompt_token_ids)
        self.num_prompt_tokens = len(prompt_token_ids)
        self.sampling = sampling
        self.adapter = adapter
        self.generator = generator
        self.detokenizer = detokenizer
        self.grammar = grammar
        self.stream = stream
        self.arrival_time = arrival_time if arrival_time is not None else time.monotonic()
        self.status = SequenceStatus.WAITING
        self.block_table: list[int] = []
        self.num_computed_tokens = 0
        """Tokens whose K/V are in the cache (prefix hits included)."""
        self.num_cached_tokens = 0
        """Prompt tokens served from the prefix cache at first admission (reported to the client)."""
        self.lora_slot = -1
        """Row of the adapter pool this request reads while running; -1 is the plain base."""
        self.finish_reason: dict[str, Any] | None = None
        self.token_counts: torch.Tensor | None = None
        """Per-token output counts, only kept for requests with penalties."""
        self.last_emitted = 0
        """Output tokens already delivered to the client (for stream_interval)."""
        self.admitted_once = False
        self.first_token_time: float | None = None
        """time.monotonic() when the first output token was sampled (for TTFT and inter-token metrics)."""
        self.return_logprob = return_logprob or top_logprobs_num > 0
        self.top_logprobs_num = top_logprobs_num
        self.output_logprobs: list[tuple[float, int]] = []
        """(logprob, token id) of each output token, filled by the sampler when return_logprob is set."""
        self.output_top_logprobs: list[list[tuple[float, int]]] = []

    # --- lengths -------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    @property
    def is_prefilling(self) -> bool:
        """More than the last token still lacks K/V: the next step computes a prompt chunk."""
        return self.num_computed_tokens < len(self.token_ids) - 1

    @property
    def adapter_key(self) -> str:
        """Cache namespace: a unique id per loaded adapter instance, "" for the base."""
        return self.adapter.cache_key if self.adapter is not None else ""

    def __repr__(self) -> str:
        return f"Sequence({self.rid!r}, len={len(self)}, computed={self.num_computed_tokens}, {self.status.name})"
