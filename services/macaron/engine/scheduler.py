"""Which requests run this step: every running row decodes, prompt chunks fill a token budget.

Continuous batching: requests join (admission) and leave (finish, abort, preemption) between
steps. Decoding rows always run; prefill work (continuing chunks first, then new admissions in
arrival order) is bounded by chunked_prefill_size tokens per step, so a long prompt never stalls
running rows for more than one bounded chunk. Admission needs a free row, KV blocks for the
prompt (cached prefix blocks are reused) and an adapter slot: slots are max_loras_per_batch,
so a batch never holds more distinct adapters than that. When decoding runs out of blocks,
the newest request is preempted (its blocks freed, hashes kept) and recomputed later.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from macaron.engine.block_manager import BlockManager
from macaron.engine.lora_manager import LoRAPool
from macaron.engine.model_runner import StepInput
from macaron.engine.sequence import Sequence, SequenceStatus


class Scheduler:
    def __init__(
        self,
        block_manager: BlockManager,
        pool: LoRAPool,
        *,
        max_running_requests: int,
        chunked_prefill_size: int,
        on_release: Callable[[Sequence], None] | None = None,
    ) -> None:
        self.block_manager = block_manager
        self.pool = pool
        self.max_running = max_running_requests
        self.chunk = chunked_prefill_size
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0
        self.on_release = on_release
        """Called when a request leaves the running batch (the runner drops its per-request state)."""

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> StepInput:
        step = StepInput(decode=[], prefill=[])
        # 1. decode every running row that has its prompt computed
        for seq in list(self.running):
            if seq.status is not SequenceStatus.RUNNING or seq.is_prefilling:
                continue
            while not self.block_manager.can_append(seq):
                victim = self.running[-1]
                self.preempt(victim)
                if victim is seq:
                    break
            if seq.status is SequenceStatus.RUNNING:
                self.block_manager.append_slot(seq)
                step.decode.append(seq)
        # rows of one adapter side by side: the grouped LoRA matmul then reads each adapter once
        step.decode.sort(key=lambda s: s.lora_slot)
        # 2. continue chunked prefills, oldest first
        budget = self.chunk
        for seq in self.running:
            if budget <= 0:
                break
            if seq.is_prefilling:
                n = min(len(seq) - seq.num_computed_tokens, budget)
                step.prefill.append((seq, n))
                budget -= n
        # 3. admit new requests while there is room
        skipped: list[Sequence] = []
        while self.waiting and budget > 0 and len(self.running) < self.max_running:
            seq = self.waiting[0]
            if seq.adapter is not None and not self.pool.can_acquire(seq.adapter):
                skipped.append(self.waiting.popleft())  # every slot busy with other adapters
                continue
            if not self.block_manager.can_allocate(seq):
                break
            self.waiting.popleft()
            self._admit(seq)
            n = min(len(seq) - seq.num_computed_tokens, budget)
            step.prefill.append((seq, n))
            budget -= n
        self.waiting.extendleft(reversed(skipped))
        return step

    def _admit(self, seq: Sequence) -> None:
        self.block_manager.allocate(seq)
        if not seq.admitted_once:
            seq.num_cached_tokens = seq.num_computed_tokens
            seq.admitted_once = True
        seq.lora_slot = self.pool.acquire(seq.adapter) if seq.adapter is not None else -1
        assert seq.adapter is None or seq.lora_slot >= 0
        seq.status = SequenceStatus.RUNNING
        self.running.append(seq)

    def _release(self, seq: Sequence) -> None:
        if self.on_release is not None:
            self.on_release(seq)
        self.block_manager.deallocate(seq)
        if seq.lora_slot >= 0:
            self.pool.release(seq.lora_slot)
            seq.lora_slot = -1

    def preempt(self, seq: Sequence) -> None:
        """Frees a running request's blocks and slot; it is recomputed (prefix cache helps) later."""
        self.running.remove(seq)
        self._release(seq)
        seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(seq)
        self.num_preemptions += 1

    def finish(self, seq: Sequence) -> None:
        """Removes a request wherever it is and frees its row, blocks and adapter slot at once."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
            self._release(seq)
        elif seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        seq.status = SequenceStatus.FINISHED
