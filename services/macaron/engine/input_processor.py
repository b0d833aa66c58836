"""A GenerateRequest checked against the model and turned into a Sequence (or refused clearly).

Runs in a worker thread (AsyncLLMEngine.submit_async), never on the event loop: tokenising a
long prompt or compiling a new JSON schema takes long enough to stall every stream. A bad
request is still refused before anything is queued: empty or out-of-vocabulary prompt, unknown adapter, prompt plus max_new_tokens over
the context length or the KV budget, sampling values out of range, a constraint that does not
compile.
"""

from __future__ import annotations

import random
import threading
from typing import Any

import torch

from macaron.engine.detokenizer import IncrementalDetokenizer
from macaron.engine.grammar import GrammarBackend, GrammarError
from macaron.engine.lora_manager import LoRAError, LoRAManager
from macaron.engine.protocol import GenerateRequest, InvalidRequestError
from macaron.engine.sampler import needs_penalties
from macaron.engine.sampling_params import SamplingParamsError
from macaron.engine.sequence import Sequence


class InputProcessor:
    def __init__(
        self,
        tokenizer: Any,
        *,
        vocab_size: int,
        context_length: int,
        max_total_tokens: int,
        max_new_tokens_limit: int,
        eos_token_ids: set[int],
        lora_manager: LoRAManager,
        random_seed: int,
        device: torch.device | None = None,
    ) -> None:
        self.device = device or torch.device("cpu")
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.context_length = context_length
        self.max_total_tokens = max_total_tokens
        self.max_new_tokens_limit = max_new_tokens_limit
        self.eos_token_ids = eos_token_ids
        self.lora_manager = lora_manager
        self._rng = random.Random(random_seed)
        self._rng_lock = threading.Lock()
        self._grammar: GrammarBackend | None = None
        self._grammar_lock = threading.Lock()

    @property
    def grammar(self) -> GrammarBackend:
        with self._grammar_lock:
            if self._grammar is None:
                self._grammar = GrammarBackend(
                    self.tokenizer, self.vocab_size, sorted(self.eos_token_ids), device=self.device
                )
            return self._grammar

    def tokenize(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            if not prompt:
                raise InvalidRequestError("the prompt is empty")
            ids = self.tokenizer.encode(prompt, add_special_tokens=False)
        else:
            ids = list(prompt)
            bad = [t for t in ids if not isinstance(t, int) or not 0 <= t < self.vocab_size]
            if bad:
                raise InvalidRequestError(f"input_ids must be token ids in [0, {self.vocab_size - 1}], got {bad[:5]}")
        if not ids:
            raise InvalidRequestError("the prompt is empty")
        return ids

    def process(self, request: GenerateRequest) -> Sequence:
        """Validates `request` and builds its Sequence; raises InvalidRequestError with a clear message."""
        if not request.rid:
            raise InvalidRequestError("rid must be a non-empty string")
        try:
            sampling = request.sampling.normalized(
                max_new_tokens_limit=self.max_new_tokens_limit, vocab_size=self.vocab_size
            )
        except SamplingParamsError as exc:
            raise InvalidRequestError(str(exc)) from exc
        if not 0 <= request.top_logprobs_num <= self.vocab_size:
            raise InvalidRequestError(f"top_logprobs_num must be in [0, {self.vocab_size}], got {request.top_logprobs_num}")
        ids = self.tokenize(request.prompt)
        total = len(ids) + sampling.max_new_tokens
        if total > self.context_length:
            raise InvalidRequestError(
                f"Requested token count exceeds the model's maximum context length of {self.context_length} "
                f"tokens. You requested a total of {total} tokens: {len(ids)} tokens from the input and "
                f"{sampling.max_new_tokens} tokens for the completion. Please reduce the prompt or max_new_tokens."
            )
        if total > self.max_total_tokens:
            raise InvalidRequestError(
                f"the request needs {total} tokens of KV cache but the engine holds {self.max_total_tokens} "
                f"(max_total_tokens); reduce the prompt or max_new_tokens"
            )
        adapter = None
        if request.lora_path:
            try:
                adapter = self.lora_manager.get(request.lora_path)
            except LoRAError as exc:
                raise InvalidRequestError(str(exc)) from exc
        grammar = None
        if sampling.constraint is not None:
            kind, spec = sampling.constraint
            try:
                grammar = self.grammar.new_state(kind, spec)
            except GrammarError as exc:
                raise InvalidRequestError(str(exc)) from exc
        if sampling.sampling_seed is not None:
            seed = sampling.sampling_seed & 0xFFFF_FFFF_FFFF_FFFF
        else:
            with self._rng_lock:
                seed = self._rng.getrandbits(63)
        seq = Sequence(
            request.rid,
            ids,
            sampling,
            adapter=adapter,
            generator=torch.Generator(device=self.device).manual_seed(seed),
            detokenizer=IncrementalDetokenizer(
                self.tokenizer,
                skip_special_tokens=bool(sampling.skip_special_tokens),
                stop=sampling.stop,
                stop_regex=sampling.stop_regex,
            ),
            grammar=grammar,
            stream=request.stream,
            return_logprob=request.return_logprob,
            top_logprobs_num=request.top_logprobs_num,
        )
        if needs_penalties(seq):
            seq.token_counts = torch.zeros(self.vocab_size, dtype=torch.int32, device=self.device)
        return seq
