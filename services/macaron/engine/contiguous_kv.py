"""Per-request contiguous copies of the KV cache, so that long decodes attend without a gather.

The paged cache scatters a request's context over blocks. Attending over it from the blocks
means gathering the whole context into a fresh padded tensor per layer and step: at 1-4 k
tokens of context that copy alone was most of a decode step (README, engine section). A
decoding request with a long context instead keeps a contiguous copy of its own K/V, built
once from the paged cache and then extended by the one token each step writes; attention reads
it in place, one small grouped matmul per row, at that row's own length (no padding to the
longest row).

The paged cache stays the source of truth (prefix caching, preemption, recompute): a copy is
only an accelerator, checked against the request's length every step and rebuilt from the
blocks when they disagree. Copies hold at most `budget_tokens` token slots in all (rows beyond
it use the gather path), are dropped when a request leaves the running batch, and are counted
in the engine's memory report.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

MIN_CONTEXT = 96
"""Rows with a shorter context use the batched gather: below ~100 tokens one padded SDPA call
over all rows beats one small matmul per row (SmolLM2 shapes, one CPU thread)."""
GROW_TOKENS = 128
"""A copy grows by at least this many token slots (or an eighth of its length): one re-copy per
growth, amortised over many steps, and at most ~12 % of slack."""


class ContiguousKV:
    """One request's K and V for every layer: `data[layer, 0|1, kv_head, position, head_dim]`."""

    __slots__ = ("data", "length")

    def __init__(self, data: torch.Tensor, length: int) -> None:
        self.data = data
        self.length = length
        """Positions [0, length) hold the request's K/V (the paged cache's values)."""

    @property
    def capacity(self) -> int:
        return self.data.shape[3]


class ContiguousKVStore:
    """Owns the copies of the running requests, keyed by sequence id, within a token budget."""

    def __init__(
        self,
        *,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
        budget_tokens: int,
        min_context: int = MIN_CONTEXT,
    ) -> None:
        self.shape = (num_layers, 2, num_kv_heads, head_dim)
        self.dtype = dtype
        self.device = device
        self.budget_tokens = max(0, budget_tokens)
        self.min_context = min_context
        self.copies: dict[int, ContiguousKV] = {}
        self.tokens_held = 0
        self.bytes_per_token = num_layers * 2 * num_kv_heads * head_dim * dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes held by the live copies now (capacity, slack included)."""
        return self.tokens_held * self.bytes_per_token

    @property
    def max_bytes(self) -> int:
        """The most the copies may ever hold (the budget)."""
        return self.budget_tokens * self.bytes_per_token

    def _capacity_for(self, tokens: int) -> int:
        want = tokens + max(GROW_TOKENS, tokens // 8)
        return -(-want // 64) * 64

    def _alloc(self, capacity: int) -> torch.Tensor:
        layers, two, heads, dim = self.shape
        return torch.empty(layers, two, heads, capacity, dim, dtype=self.dtype, device=self.device)

    def acquire(
        self,
        seq_id: int,
        pos: int,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        context_slots: Callable[[int], torch.Tensor],
    ) -> ContiguousKV | None:
        """The copy of a row about to decode position `pos` (positions [0, pos) computed), with room
        for `pos`; None when the context is short or the budget is spent (the row then gathers).
        `context_slots(n)` gives the paged-cache slots of positions [0, n), called only to rebuild."""
        if pos + 1 < self.min_context or self.budget_tokens == 0:
            return None
        copy = self.copies.get(seq_id)
        if copy is not None and copy.length != pos:
            self.release(seq_id)  # out of step with the blocks (a failed step): rebuild
            copy = None
        if copy is not None and pos < copy.capacity:
            return copy
        capacity = self._capacity_for(pos + 1)
        held_after = self.tokens_held - (copy.capacity if copy is not None else 0) + capacity
        if held_after > self.budget_tokens:
            self.release(seq_id)
            return None
        data = self._alloc(capacity)
        if copy is not None:
            data[:, :, :, :pos].copy_(copy.data[:, :, :, :pos])
        elif pos:
            index = context_slots(pos)
            for layer, (k_cache, v_cache) in enumerate(kv_caches):
                data[layer, 0, :, :pos].copy_(k_cache.index_select(0, index).transpose(0, 1))
                data[layer, 1, :, :pos].copy_(v_cache.index_select(0, index).transpose(0, 1))
        self.release(seq_id)
        copy = ContiguousKV(data, pos)
        self.copies[seq_id] = copy
        self.tokens_held += capacity
        return copy

    def release(self, seq_id: int) -> None:
        """Drops a request's copy (it finished, was preempted, or fell out of step)."""
        copy = self.copies.pop(seq_id, None)
        if copy is not None:
            self.tokens_held -= copy.capacity

    def clear(self) -> None:
        self.copies.clear()
        self.tokens_held = 0


def attend_contiguous(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """One query token's attention over a contiguous context, GQA by grouping the query heads of a
    KV head (no repeated K/V): q [H, D], k and v [Hkv, L, D] (views into a copy) -> [H, D]."""
    heads_kv, _, dim = k.shape
    qg = (q * scale).view(heads_kv, -1, dim)
    scores = torch.bmm(qg, k.transpose(1, 2))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(v.dtype)
    return torch.bmm(probs, v).view(-1, dim)
