"""Prefix affinity: the rendered prompt as a chain of block hashes, and which replica served each.

The prompt text (rendered by `macaron.prompting`, exactly as the specialist will send it) is cut
into fixed-size character blocks; only full blocks count. Each block's hash covers the block
and the previous block's hash, seeded with the adapter and its version, so one hash names a
whole prefix under one adapter (as nano-vllm's `compute_hash` and llm-d's approximate prefix
producer chain theirs): two adapters never share cache entries, and neither do two versions.

In the shared store, `pfx:<hash>` is a hash {replica URL: last time served (ms)} with a TTL,
so every router replica sees where a prefix was served. A replica matches a request up to the
deepest block it served recently (the chain makes a deep match imply the shallower ones);
the longest match wins. Entries are written after the pick, for the chosen replica only:
at once into a bounded in-process overlay (so this router's next request sees them even
before Redis has them, as an in-memory tree would, and while Redis is down), and to Redis in
the background (so every other router replica sees them too).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from macaron.store import Store

KEY_PREFIX = "pfx:"
WRITE_CONCURRENCY = 8
LOCAL_MAX_BLOCKS = 200_000


def block_hashes(text: str, *, block_chars: int, seed: str, max_blocks: int) -> list[str]:
    """Chained hashes of the first `max_blocks` full blocks of `text` (hex)."""
    if block_chars <= 0:
        raise ValueError("block_chars must be positive")
    previous = hashlib.blake2b(seed.encode(), digest_size=16).digest()
    out: list[str] = []
    for start in range(0, min(len(text) // block_chars, max_blocks) * block_chars, block_chars):
        h = hashlib.blake2b(previous, digest_size=16)
        h.update(text[start : start + block_chars].encode("utf-8", "surrogatepass"))
        previous = h.digest()
        out.append(previous.hex())
    return out


def head_block(hashes: Sequence[str], text: str, shared_prefix: str, block_chars: int) -> str:
    """The hash of the block where `text` stops being `shared_prefix` (the specialist's own profile prompt, which
    every prompt of that specialist opens with): the first block that names this prompt's own head (an
    application's system prompt, or the conversation), chained over everything before it. Keying a prompt's home
    and ties on its first block instead gave every application of a specialist the same home, so the first
    sessions of two applications that started together on two routers met there. The last hashed block when the
    prompt ends within a block or two of the profile; "" without blocks."""
    if not hashes:
        return ""
    at = text.find(shared_prefix) if shared_prefix else -1
    end = at + len(shared_prefix) if at >= 0 else 0
    return hashes[min(end // block_chars, len(hashes) - 1)]


def adapter_seed(adapter: str, version: str) -> str:
    """The chain's seed: blocks are cached per adapter and version."""
    return f"{adapter}@{version}" if version else adapter


def block_keys(hashes: Sequence[str]) -> list[str]:
    return [KEY_PREFIX + h for h in hashes]


def now_ms() -> int:
    return int(time.time() * 1000)


def _ms_of(stamp: bytes) -> int:
    try:
        return int(stamp)
    except ValueError:
        return 0


def matched_blocks(blocks: Sequence[Mapping[str, bytes]], *, now: int, ttl_s: float,
                   not_before: Mapping[str, int] | None = None) -> dict[str, int]:
    """{replica: blocks matched from the start} over what the store holds for a request's blocks.

    `not_before`: per replica, the time (ms) it last started: anything sent before is gone."""
    horizon = now - int(ttl_s * 1000)
    starts = not_before or {}
    best: dict[str, int] = {}
    for depth, served in enumerate(blocks, start=1):
        for replica, stamp in served.items():
            try:
                fresh = int(stamp) >= max(horizon, starts.get(replica, 0))
            except ValueError:
                continue
            if fresh:
                best[replica] = depth
    return best


@dataclass
class PrefixIndex:
    """Writes the blocks a replica served (reads happen in the placement snapshot)."""

    store: Store
    ttl_s: float
    local_max_blocks: int = LOCAL_MAX_BLOCKS
    local: OrderedDict[str, dict[str, bytes]] = field(default_factory=OrderedDict)
    """The overlay: block hash → {replica: stamp}, least recently written first."""

    def remember(self, hashes: Sequence[str], replica: str) -> None:
        """Marks the blocks in the in-process overlay (synchronously, right after the pick)."""
        stamp = str(now_ms()).encode()
        for h in hashes:
            entry = self.local.get(h)
            if entry is None:
                entry = self.local[h] = {}
            else:
                self.local.move_to_end(h)
            entry[replica] = stamp
        while len(self.local) > self.local_max_blocks:
            self.local.popitem(last=False)

    def overlay(self, hashes: Sequence[str], rows: Sequence[Mapping[str, bytes]]) -> tuple[dict[str, bytes], ...]:
        """The store's rows for `hashes` with this router's newer entries merged in."""
        out = []
        for i, h in enumerate(hashes):
            row = dict(rows[i]) if i < len(rows) else {}
            for replica, stamp in self.local.get(h, {}).items():
                if replica not in row or _ms_of(row[replica]) < _ms_of(stamp):
                    row[replica] = stamp
            out.append(row)
        return tuple(out)

    def forget_local(self, hashes: Sequence[str], replica: str) -> None:
        """Drops `replica` from the overlay's entries of `hashes`."""
        for h in hashes:
            entry = self.local.get(h)
            if entry is not None:
                entry.pop(replica, None)

    async def forget(self, hashes: Sequence[str], replica: str) -> None:
        """The replica does not hold these blocks (its response said so): drop them, here and in the store."""
        self.forget_local(hashes, replica)
        if hashes:
            await self.store.hbatch([("del", KEY_PREFIX + h, [replica]) for h in hashes], self.ttl_s)

    async def record(self, hashes: Sequence[str], replica: str, seen: Sequence[Mapping[str, bytes]] = ()) -> int:
        """Marks `replica` as holding every block; skips blocks marked for it in the last quarter TTL.

        `seen` is what the snapshot read for the same blocks (to skip fresh entries). Returns
        how many blocks were written.
        """
        now = now_ms()
        fresh_after = now - int(self.ttl_s * 250)
        todo = []
        for i, h in enumerate(hashes):
            stamp = seen[i].get(replica) if i < len(seen) else None
            try:
                if stamp is not None and int(stamp) >= fresh_after:
                    continue
            except ValueError:
                pass
            todo.append(KEY_PREFIX + h)
        value = str(now).encode()
        for start in range(0, len(todo), WRITE_CONCURRENCY):
            await asyncio.gather(*(self.store.hset(k, {replica: value}, self.ttl_s) for k in todo[start : start + WRITE_CONCURRENCY]))
        return len(todo)
