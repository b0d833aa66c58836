"""KV-cache blocks: allocation, prefix reuse through chained hashes (per adapter), ref counts.

A full block's hash chains the previous block's hash, the adapter's cache key and the block's
token ids, so one hash names a whole prefix under one adapter: a LoRA on k/v changes the cache,
so one adapter's blocks are never reused by another adapter or by the base. A hit is confirmed
by comparing token ids. Freed blocks keep their hash and can be revived until they are reused;
the free list is LRU (blocks freed last are reused last, and a sequence frees its tail first).

With `events` on, every block that gets a hash is reported as BlockStored (its parent, tokens and
adapter's `lora_id`) and every hashed block that is reused for something else as BlockRemoved,
in SGLang's KV-event format (macaron.kv_events); the engine publishes them once per step.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

import numpy as np

from macaron.engine.sequence import Sequence
from macaron.kv_events.wire import BlockRemoved, BlockStored, Event, lora_id_for


def compute_block_hash(token_ids: list[int], prev_hash: int, adapter_key: str) -> int:
    """Hash of a full block given the hash of the prefix before it (-1 for the first block)."""
    h = hashlib.blake2b(digest_size=8)
    h.update(prev_hash.to_bytes(8, "little", signed=True))
    h.update(adapter_key.encode())
    h.update(b"\0")
    h.update(np.asarray(token_ids, dtype=np.int64).tobytes())
    return int.from_bytes(h.digest(), "little", signed=True)


class Block:
    __slots__ = ("block_id", "ref_count", "hash", "token_ids")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_count = 0
        self.hash = -1
        self.token_ids: list[int] = []

    def reset(self) -> None:
        self.ref_count = 1
        self.hash = -1
        self.token_ids = []


class BlockManager:
    """Owns `num_blocks` blocks of `block_size` token slots; the runner owns the tensors."""

    def __init__(self, num_blocks: int, block_size: int, *, events: bool = False) -> None:
        assert num_blocks > 0 and block_size > 0
        self.events: list[Event] | None = [] if events else None
        """KV-cache events since the last `take_events()` (None: not recorded)."""
        self.block_size = block_size
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.hash_to_block_id: dict[int, int] = {}
        self.free_block_ids: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        """Unreferenced blocks, least recently freed first (the next to be reused)."""
        self.used_block_ids: set[int] = set()

    # --- queries ---------------------------------------------------------------------------
    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_ids)

    def blocks_needed(self, num_tokens: int) -> int:
        return (num_tokens + self.block_size - 1) // self.block_size

    def _match_prefix(self, seq: Sequence) -> list[int]:
        """Block ids of the longest cached prefix of `seq` (full blocks, confirmed by token ids)."""
        hits: list[int] = []
        prev = -1
        # at least one token must be computed to produce logits: never reuse the whole sequence
        n_full = (len(seq) - 1) // self.block_size
        for i in range(n_full):
            tokens = seq.token_ids[i * self.block_size : (i + 1) * self.block_size]
            prev = compute_block_hash(tokens, prev, seq.adapter_key)
            block_id = self.hash_to_block_id.get(prev, -1)
            if block_id == -1 or self.blocks[block_id].token_ids != tokens:
                break
            hits.append(block_id)
        return hits

    def can_allocate(self, seq: Sequence) -> bool:
        hits = self._match_prefix(seq)
        revived = sum(1 for b in hits if self.blocks[b].ref_count == 0)
        fresh = self.blocks_needed(len(seq)) - len(hits)
        return fresh + revived <= self.num_free_blocks

    # --- allocation ------------------------------------------------------------------------
    def take_events(self) -> list[Event]:
        """The events recorded since the last call (empty when events are off)."""
        if not self.events:
            return []
        out, self.events = self.events, []
        return out

    def _take_free_block(self) -> int:
        block_id, _ = self.free_block_ids.popitem(last=False)
        block = self.blocks[block_id]
        if block.hash != -1 and self.hash_to_block_id.get(block.hash) == block_id:
            del self.hash_to_block_id[block.hash]
            if self.events is not None:
                self.events.append(BlockRemoved([block.hash]))
        block.reset()
        self.used_block_ids.add(block_id)
        return block_id

    def allocate(self, seq: Sequence) -> None:
        """Gives `seq` blocks for all its tokens, reusing cached prefix blocks; sets num_computed_tokens."""
        assert not seq.block_table
        hits = self._match_prefix(seq)
        for block_id in hits:
            block = self.blocks[block_id]
            if block.ref_count == 0:
                del self.free_block_ids[block_id]
                self.used_block_ids.add(block_id)
            block.ref_count += 1
            seq.block_table.append(block_id)
        # ascending ids: blocks freed together come back as a run, and a run of consecutive blocks is
        # one strided copy when the runner builds the request's contiguous K/V copy
        fresh = [self._take_free_block() for _ in range(self.blocks_needed(len(seq)) - len(hits))]
        seq.block_table.extend(sorted(fresh))
        seq.num_computed_tokens = len(hits) * self.block_size

    def deallocate(self, seq: Sequence) -> None:
        """Drops `seq`'s references; blocks keep their hash so a later request can revive them."""
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            assert block.ref_count >= 0
            if block.ref_count == 0:
                self.used_block_ids.discard(block_id)
                self.free_block_ids[block_id] = None
        seq.block_table.clear()
        seq.num_computed_tokens = 0

    def can_append(self, seq: Sequence) -> bool:
        """True when the slot for `seq`'s newest token exists or one free block can hold it."""
        return len(seq.block_table) >= self.blocks_needed(len(seq)) or self.num_free_blocks > 0

    def append_slot(self, seq: Sequence) -> None:
        """Makes room for `seq`'s newest token (a new block when the last one is full)."""
        if len(seq.block_table) < self.blocks_needed(len(seq)):
            seq.block_table.append(self._take_free_block())

    def register_computed(self, seq: Sequence, prev_computed: int) -> None:
        """Hashes the blocks that became full and computed, so later requests can reuse them."""
        bs = self.block_size
        first = prev_computed // bs
        last = seq.num_computed_tokens // bs
        for i in range(first, last):
            block = self.blocks[seq.block_table[i]]
            if block.hash != -1:
                continue
            prev = self.blocks[seq.block_table[i - 1]].hash if i > 0 else -1
            tokens = seq.token_ids[i * bs : (i + 1) * bs]
            block.hash = compute_block_hash(tokens, prev, seq.adapter_key)
            block.token_ids = tokens
            replaced = self.hash_to_block_id.get(block.hash)
            self.hash_to_block_id[block.hash] = block.block_id
            if self.events is not None and replaced is None:  # a duplicate of a cached block is no news
                self.events.append(BlockStored([block.hash], prev if i > 0 else None, list(tokens), bs,
                                               lora_id_for(seq.adapter.name) if seq.adapter is not None else None))

    def check_invariants(self) -> None:
        """Asserts the bookkeeping is consistent (tests call this after every step)."""
        assert len(self.free_block_ids) + len(self.used_block_ids) == len(self.blocks)
        for block in self.blocks:
            assert (block.ref_count == 0) == (block.block_id in self.free_block_ids)
        for h, block_id in self.hash_to_block_id.items():
            assert self.blocks[block_id].hash == h
