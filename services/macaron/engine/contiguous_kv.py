"""Per-request contiguous copies of the KV cache, so that long decodes attend without a gather.

The paged cache scatters a request's context over blocks. Attending over it from the blocks
means gathering the whole context into a fresh padded tensor per layer and step: at 1-4 k
tokens of context that copy alone was most of a decode step (docs/engine.md). A
decoding request with a long context instead keeps a contiguous copy of its own K/V, built
once from the paged cache and then extended by the one token each step writes; attention reads
it in place, one small grouped matmul per row, at that row's own length (no padding to the
longest row).

A request whose prompt is long gets its copy when its prefill starts: each prefill chunk writes
its K/V into the copy as well as into the blocks, and a chunk after the first attends over the
copy in place (no gather of the whole context per chunk), so decoding starts with the copy
complete. Only what the request did not compute itself (its prefix-cache hit) is copied in:
from a live copy of another request that holds the same blocks (one contiguous copy for all
layers: rows sharing a system prompt share its build), else from the blocks run by run (a run
is consecutive positions in consecutive cache slots: one strided copy each), else gathered.

The paged cache stays the source of truth (prefix caching, preemption, recompute): a copy is
only an accelerator, checked against the request's length every step and rebuilt from the
blocks when they disagree. Copies hold at most `budget_tokens` token slots in all (rows beyond
it use the gather path), are dropped when a request leaves the running batch, their buffers kept
as spares for the next copies (within the same budget: a fresh buffer's page faults cost ~5x the
copy into it), and are counted in the engine's memory report.
"""

from __future__ import annotations

import torch

MIN_CONTEXT = 96
"""Rows with a shorter context use the batched gather: below ~100 tokens one padded SDPA call
over all rows beats one small matmul per row (SmolLM2 shapes, one CPU thread)."""
MAX_RUNS = 32
"""Beyond this many runs of consecutive cache slots, a build gathers with one index_select per
layer instead of one copy per run."""
GROW_TOKENS = 128
"""A copy grows by at least this many token slots (or an eighth of its length): one re-copy per
growth, amortised over many steps, and at most ~12 % of slack."""


class ContiguousKV:
    """One request's K and V for every layer: `data[layer, 0|1, kv_head, position, head_dim]`."""

    __slots__ = ("data", "length", "blocks")

    def __init__(self, data: torch.Tensor, length: int, blocks: list[int]) -> None:
        self.data = data
        self.length = length
        """Positions [0, length) hold the request's K/V (the paged cache's values)."""
        self.blocks = blocks
        """The request's block table (the live list): which blocks another request shares with it."""

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
        self.live_tokens = 0
        """Token slots of the live copies."""
        self.spare: list[torch.Tensor] = []
        """Buffers of released copies, kept for reuse within the budget: a fresh buffer costs its
        first touch (page faults), measured at ~5x the copy into it on this engine's CPU hosts."""
        self.spare_tokens = 0
        self.incremental = True
        """False: copies only for decode rows, built by gathering the blocks into fresh buffers (the
        engine before prefill wrote them; kept so that the benchmarks measure before and after in one
        run)."""
        self.built_tokens = {"sibling": 0, "runs": 0, "gathered": 0}
        """Positions copied into new copies so far, by source (what a request did not write itself)."""
        self.bytes_per_token = num_layers * 2 * num_kv_heads * head_dim * dtype.itemsize

    @property
    def tokens_held(self) -> int:
        """Token slots held: live copies and spare buffers."""
        return self.live_tokens + self.spare_tokens

    @property
    def nbytes(self) -> int:
        """Bytes held now: live copies (capacity, slack included) and spare buffers."""
        return self.tokens_held * self.bytes_per_token

    @property
    def live_bytes(self) -> int:
        """Bytes of the live copies alone."""
        return self.live_tokens * self.bytes_per_token

    @property
    def max_bytes(self) -> int:
        """The most the copies may ever hold (the budget)."""
        return self.budget_tokens * self.bytes_per_token

    def _capacity_for(self, tokens: int) -> int:
        want = tokens + max(GROW_TOKENS, tokens // 8)
        return -(-want // 64) * 64

    def _take(self, capacity: int, replacing: int) -> torch.Tensor | None:
        """A buffer of at least `capacity` slots (a spare of at most twice that, else a new one),
        counted live; None when the budget cannot hold it even with every spare dropped.
        `replacing`: slots of a live copy the caller releases right after."""
        fits = [i for i, t in enumerate(self.spare) if capacity <= t.shape[3] <= 2 * capacity] if self.incremental else []
        if fits:
            data = self.spare.pop(min(fits, key=lambda i: self.spare[i].shape[3]))
            self.spare_tokens -= data.shape[3]
            self.live_tokens += data.shape[3]
            return data
        while self.spare and self.tokens_held - replacing + capacity > self.budget_tokens:
            self._drop_largest_spare()
        if self.live_tokens - replacing + capacity > self.budget_tokens:
            return None
        layers, two, heads, dim = self.shape
        data = torch.empty(layers, two, heads, capacity, dim, dtype=self.dtype, device=self.device)
        self.live_tokens += capacity
        return data

    def _drop_largest_spare(self) -> None:
        largest = max(range(len(self.spare)), key=lambda i: self.spare[i].shape[3])
        self.spare_tokens -= self.spare.pop(largest).shape[3]

    def acquire(
        self,
        seq_id: int,
        pos: int,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        block_table: list[int],
        block_size: int,
        want: int = 0,
    ) -> ContiguousKV | None:
        """The copy of a row whose positions [0, pos) are computed, with room for positions up to
        max(pos + 1, want) (a prefill asks for its whole prompt); None when that is short or the
        budget is spent (the row then gathers). Builds what is missing from the paged cache."""
        need = max(pos + 1, want)
        if need < self.min_context or self.budget_tokens == 0:
            return None
        copy = self.copies.get(seq_id)
        if copy is not None and copy.length != pos:
            self.release(seq_id)  # out of step with the blocks (a failed step): rebuild
            copy = None
        if copy is not None and need <= copy.capacity:
            return copy
        data = self._take(self._capacity_for(need), copy.capacity if copy is not None else 0)
        if data is None:
            self.release(seq_id)
            return None
        if copy is not None:
            data[:, :, :, :pos].copy_(copy.data[:, :, :, :pos])
        elif pos:
            self._fill(data, pos, seq_id, kv_caches, block_table, block_size)
        self.release(seq_id)
        copy = ContiguousKV(data, pos, block_table)
        self.copies[seq_id] = copy
        return copy

    def _fill(
        self,
        data: torch.Tensor,
        pos: int,
        seq_id: int,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        block_table: list[int],
        block_size: int,
    ) -> None:
        """Writes positions [0, pos) of a new copy: the part shared with another live copy from
        it, the rest from the paged cache."""
        done = 0
        source, shared = self._sibling(seq_id, block_table, pos, block_size) if self.incremental else (None, 0)
        if source is not None:
            data[:, :, :, :shared].copy_(source.data[:, :, :, :shared])
            done = shared
            self.built_tokens["sibling"] += shared
        if done == pos:
            return
        runs = block_runs(block_table, done, pos, block_size) if self.incremental else []
        if runs and len(runs) <= MAX_RUNS:
            for layer, (k_cache, v_cache) in enumerate(kv_caches):
                for first, slot, n in runs:
                    data[layer, 0, :, first : first + n].copy_(k_cache[slot : slot + n].transpose(0, 1))
                    data[layer, 1, :, first : first + n].copy_(v_cache[slot : slot + n].transpose(0, 1))
            self.built_tokens["runs"] += pos - done
            return
        index = torch.tensor(
            [block_table[p // block_size] * block_size + p % block_size for p in range(done, pos)],
            dtype=torch.long, device=self.device,
        )
        for layer, (k_cache, v_cache) in enumerate(kv_caches):
            data[layer, 0, :, done:pos].copy_(k_cache.index_select(0, index).transpose(0, 1))
            data[layer, 1, :, done:pos].copy_(v_cache.index_select(0, index).transpose(0, 1))
        self.built_tokens["gathered"] += pos - done

    def _sibling(
        self, seq_id: int, block_table: list[int], pos: int, block_size: int
    ) -> tuple[ContiguousKV | None, int]:
        """The live copy sharing the longest leading run of blocks with `block_table` (a prefix-cache
        hit on the same prompt), and how many of positions [0, pos) it can give."""
        best, best_n = None, 0
        for other_id, other in self.copies.items():
            if other_id == seq_id or not other.blocks or not block_table or other.blocks[0] != block_table[0]:
                continue
            limit = min(pos, other.length)
            n_blocks = min(len(other.blocks), len(block_table), -(-limit // block_size))
            i = 0
            while i < n_blocks and other.blocks[i] == block_table[i]:
                i += 1
            n = min(i * block_size, limit)
            if n > best_n:
                best, best_n = other, n
        return best, best_n

    def release(self, seq_id: int) -> None:
        """Drops a request's copy (it finished, was preempted, or fell out of step)."""
        copy = self.copies.pop(seq_id, None)
        if copy is not None:
            self.live_tokens -= copy.capacity
            self.spare.append(copy.data)
            self.spare_tokens += copy.capacity
            while self.spare and self.tokens_held > self.budget_tokens:
                self._drop_largest_spare()

    def clear(self) -> None:
        """Drops every copy and spare buffer."""
        self.copies.clear()
        self.spare.clear()
        self.live_tokens = self.spare_tokens = 0


def block_runs(block_table: list[int], start: int, end: int, block_size: int) -> list[tuple[int, int, int]]:
    """(first position, first cache slot, length) of each run of positions [start, end) whose
    cache slots are consecutive (blocks allocated together are: the allocator hands them out in
    ascending order)."""
    runs: list[tuple[int, int, int]] = []
    p = start
    while p < end:
        offset = p % block_size
        slot = block_table[p // block_size] * block_size + offset
        n = min(block_size - offset, end - p)
        if runs and runs[-1][1] + runs[-1][2] == slot:
            first, first_slot, length = runs[-1]
            runs[-1] = (first, first_slot, length + n)
        else:
            runs.append((p, slot, n))
        p += n
    return runs


def attend_contiguous(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """One query token's attention over a contiguous context, GQA by grouping the query heads of a
    KV head (no repeated K/V): q [H, D], k and v [Hkv, L, D] (views into a copy) -> [H, D]."""
    heads_kv, _, dim = k.shape
    qg = (q * scale).view(heads_kv, -1, dim)
    scores = torch.bmm(qg, k.transpose(1, 2))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(v.dtype)
    return torch.bmm(probs, v).view(-1, dim)
