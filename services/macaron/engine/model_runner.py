"""Tensors in, logits out: owns the model weights and the paged KV cache, builds each step's batch.

The KV cache is preallocated per layer as [num_blocks * block_size, kv_heads, head_dim]
(memory bounded by max_total_tokens); a token's slot is block_table[pos // bs] * bs + pos % bs.
Requests with a long context also keep a contiguous copy of their K/V (ContiguousKVStore,
bounded by its own token budget), written as they prefill, so that neither decode steps nor
later prefill chunks gather the blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from macaron.engine.cascade import shared_prefix_groups
from macaron.engine.contiguous_kv import ContiguousKV, ContiguousKVStore
from macaron.engine.lora_manager import LoRAPool
from macaron.engine.models.layers import BatchContext, PrefillChunk
from macaron.engine.models.llama import CausalLM, ModelShape, load_model
from macaron.engine.sequence import Sequence


@dataclass
class StepInput:
    """What the scheduler decided for one step."""

    decode: list[Sequence]
    prefill: list[tuple[Sequence, int]]
    """(sequence, number of its tokens computed this step)."""

    @property
    def sampled(self) -> list[Sequence]:
        """Rows that produce a token this step: decodes and prefills that reach their last token."""
        return self.decode + [s for s, n in self.prefill if s.num_computed_tokens + n == len(s)]

    def __bool__(self) -> bool:
        return bool(self.decode or self.prefill)


class ModelRunner:
    """Runs the forward pass for a StepInput; returns logits [num_sampled, vocab]."""

    def __init__(
        self,
        model_dir: Path,
        *,
        dtype: torch.dtype,
        device: torch.device,
        num_blocks: int,
        block_size: int,
        contiguous_kv_tokens: int | None = None,
        pack_weights: bool = True,
        cascade_attention: bool = True,
    ) -> None:
        self.device = device
        self.dtype = dtype
        self.block_size = block_size
        self.cascade_attention = cascade_attention
        """Decode rows behind the same cached prefix read it once per group (`macaron.engine.cascade`)."""
        self.num_blocks = num_blocks
        self.model: CausalLM = load_model(model_dir, dtype, device, pack=pack_weights)
        self.shape: ModelShape = self.model.shape
        s = self.shape
        n_slots = num_blocks * block_size
        self.kv_caches = [
            (
                torch.zeros(n_slots, s.num_kv_heads, s.head_dim, dtype=dtype, device=device),
                torch.zeros(n_slots, s.num_kv_heads, s.head_dim, dtype=dtype, device=device),
            )
            for _ in range(s.num_layers)
        ]
        self._arange_bs = torch.arange(block_size, device=device)
        self.contiguous = ContiguousKVStore(
            num_layers=s.num_layers,
            num_kv_heads=s.num_kv_heads,
            head_dim=s.head_dim,
            dtype=dtype,
            device=device,
            budget_tokens=n_slots if contiguous_kv_tokens is None else contiguous_kv_tokens,
        )

    @property
    def weight_bytes(self) -> int:
        return self.model.weight_bytes

    @property
    def packed_head_copy_bytes(self) -> int:
        """The tied output projection's packed copy (CPU weight packing; 0 otherwise)."""
        return self.model.packed_head_copy_bytes

    @property
    def kv_cache_bytes(self) -> int:
        return sum(k.nbytes + v.nbytes for k, v in self.kv_caches)

    @property
    def contiguous_kv_bytes(self) -> int:
        """Bytes held now by the long-context rows' contiguous K/V copies."""
        return self.contiguous.nbytes

    def release(self, seq: Sequence) -> None:
        """Drops what the runner keeps for a request that left the running batch."""
        self.contiguous.release(seq.seq_id)

    def _slots(self, seq: Sequence, start: int, end: int) -> list[int]:
        bs, table = self.block_size, seq.block_table
        return [table[p // bs] * bs + p % bs for p in range(start, end)]

    def _context_slots(self, tables: list[list[int]], lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Padded cache-slot index [B, L] of each row's whole context, and its validity mask."""
        bs = self.block_size
        max_len = max(lengths)
        n_blocks = (max_len + bs - 1) // bs
        padded = torch.tensor(
            [t[:n_blocks] + [0] * (n_blocks - len(t[:n_blocks])) for t in tables], dtype=torch.long, device=self.device
        )
        index = (padded[:, :, None] * bs + self._arange_bs).view(len(tables), -1)[:, :max_len]
        lens = torch.tensor(lengths, dtype=torch.long, device=self.device)
        mask = torch.arange(max_len, device=self.device)[None, :] < lens[:, None]
        return index, mask

    def prepare(self, step: StepInput, pool: LoRAPool | None) -> tuple[torch.Tensor, BatchContext]:
        tokens: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        row_slots: list[int] = []  # LoRA slot per token
        for seq in step.decode:
            pos = len(seq) - 1
            tokens.append(seq.token_ids[pos])
            positions.append(pos)
            slots.append(seq.block_table[pos // self.block_size] * self.block_size + pos % self.block_size)
            row_slots.append(seq.lora_slot)
        decode_index = decode_mask = decode_gathered = None
        contiguous: list[tuple[int, ContiguousKV, int]] = []
        gathered: list[Sequence] = []
        gathered_rows: list[int] = []
        for i, seq in enumerate(step.decode):
            pos = len(seq) - 1
            copy = self.contiguous.acquire(seq.seq_id, pos, self.kv_caches, seq.block_table, self.block_size)
            if copy is None:
                gathered.append(seq)
                gathered_rows.append(i)
            else:
                contiguous.append((i, copy, pos))
        if gathered:
            decode_index, mask = self._context_slots([s.block_table for s in gathered], [len(s) for s in gathered])
            decode_mask = mask[:, None, None, :]
            if len(gathered) < len(step.decode):
                decode_gathered = torch.tensor(gathered_rows, dtype=torch.long, device=self.device)
        cascade = []
        if self.cascade_attention and len(contiguous) > 1:
            cascade, contiguous = shared_prefix_groups(contiguous, self.block_size)
        logits_index = list(range(len(step.decode)))
        prefills: list[PrefillChunk] = []
        for seq, n in step.prefill:
            start = seq.num_computed_tokens
            offset = len(tokens)
            tokens.extend(seq.token_ids[start : start + n])
            positions.extend(range(start, start + n))
            slots.extend(self._slots(seq, start, start + n))
            row_slots.extend([seq.lora_slot] * n)
            # a long prompt writes its copy while it prefills, and later chunks read it in place
            copy = None
            if self.contiguous.incremental:
                copy = self.contiguous.acquire(seq.seq_id, start, self.kv_caches, seq.block_table, self.block_size, len(seq))
            if start == 0:
                prefills.append(PrefillChunk(offset, n, None, None, copy, start))
            else:
                ctx_len = start + n
                kv_index = None
                if copy is None:
                    kv_index = torch.tensor(self._slots(seq, 0, ctx_len), dtype=torch.long, device=self.device)
                q_pos = torch.arange(start, ctx_len, device=self.device)
                mask = torch.arange(ctx_len, device=self.device)[None, :] <= q_pos[:, None]
                prefills.append(PrefillChunk(offset, n, kv_index, mask[None, None], copy, start))
            if start + n == len(seq):
                logits_index.append(offset + n - 1)
        ctx = BatchContext(
            positions=torch.tensor(positions, dtype=torch.long, device=self.device),
            slot_mapping=torch.tensor(slots, dtype=torch.long, device=self.device),
            num_decode=len(step.decode),
            decode_kv_index=decode_index,
            decode_mask=decode_mask,
            decode_gathered=decode_gathered,
            decode_contiguous=contiguous,
            decode_cascade=cascade,
            prefills=prefills,
            logits_index=torch.tensor(logits_index, dtype=torch.long, device=self.device),
        )
        if pool is not None:
            ctx.lora_segments = lora_segments(row_slots) or None
        input_ids = torch.tensor(tokens, dtype=torch.long, device=self.device)
        return input_ids, ctx

    @torch.inference_mode()
    def run(self, step: StepInput, pool: LoRAPool | None) -> torch.Tensor:
        input_ids, ctx = self.prepare(step, pool)
        use_pool = pool if ctx.lora_segments else None
        logits = self.model(input_ids, ctx, self.kv_caches, use_pool)
        for _, copy, pos in ctx.decode_contiguous + [m for g in ctx.decode_cascade for m in g.members]:
            copy.length = pos + 1
        for chunk in ctx.prefills:
            if chunk.copy is not None:
                chunk.copy.length = chunk.position + chunk.length
        return logits


def lora_segments(row_slots: list[int]) -> list[tuple[int, int, int]]:
    """Runs of consecutive tokens with the same adapter slot, as (slot, start, end); base (-1) skipped."""
    segments: list[tuple[int, int, int]] = []
    start = 0
    for i in range(1, len(row_slots) + 1):
        if i == len(row_slots) or row_slots[i] != row_slots[start]:
            if row_slots[start] >= 0:
                segments.append((row_slots[start], start, i))
            start = i
    return segments
