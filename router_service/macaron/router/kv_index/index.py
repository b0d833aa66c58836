"""Applies a replica's KV-cache events to the shared store, and reads the store back for placement.

Store layout (the placement store):

- `kv:<key>`: hash {replica URL: epoch}: the replica holds the block named `key` (keys.py);
  written on BlockStored, its field deleted on BlockRemoved, with a long TTL as a guard against
  a removal that never arrived;
- `kvepoch`: hash {replica URL: epoch}: the replica publishes events, and only entries carrying
  its current epoch count. A restart (the sequence goes back), a cleared cache or missed events
  (a gap in the sequence) start a new epoch: everything known of that replica is dropped at
  once, with no scan. The epoch is the batch's own timestamp, so every router replica, reading
  the same message, picks the same one;
- `kvmap:<replica digest>`: hash {engine block hash: key}: how this replica names each block, so
  a BlockRemoved (engine hashes only) finds its key, and a router that starts late (or restarts)
  continues from what others wrote.

Every router replica runs the writer for every engine replica; the writes are idempotent, so
more of them only add redundancy, and all read one truth.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from macaron.kv_events.wire import AllBlocksCleared, BlockRemoved, BlockStored, EngineHash, KVEventBatch
from macaron.router.kv_index.keys import KEY_PREFIX, lora_seed, next_key
from macaron.store import Store
from macaron.store.base import HashOp, chain_depths

log = logging.getLogger(__name__)
EPOCH_KEY = "kvepoch"
MAP_PREFIX = "kvmap:"
EPOCH_TTL_S = 7 * 86400.0


def map_key(replica: str) -> str:
    return MAP_PREFIX + hashlib.sha1(replica.encode()).hexdigest()[:20]


def _hash_field(h: EngineHash) -> str:
    return h.hex() if isinstance(h, bytes) else str(h)


def matched_depths(rows: Sequence[Mapping[str, bytes]], epochs: Mapping[str, bytes]) -> dict[str, int]:
    """{replica: blocks held from the prompt's start} for every replica that publishes (has an epoch)."""
    return chain_depths(rows, epochs)


@dataclass
class ReplicaState:
    """What one writer knows of one replica's stream."""

    epoch: str = ""
    last_seq: int = -1
    keys: dict[EngineHash, bytes] = field(default_factory=dict)
    """Engine block hash → index key (bytes)."""
    other_block_size: int = 0
    """A block size other than ours was seen (its events cannot be indexed)."""
    stale: bool = False
    """A write failed (store down): the next batch starts a new epoch instead of trusting a partial index."""
    resident: dict[str, int] = field(default_factory=dict)
    """Index key (hex) → how many of the replica's engine blocks hold it: the blocks of `keys`, by key, so
    placement reads residency in process (`KVIndexWriter.depths`) with no store round trip."""

    def hold(self, engine_hash: EngineHash, key: bytes) -> None:
        old = self.keys.get(engine_hash)
        if old is not None:
            self.drop(engine_hash)
        self.keys[engine_hash] = key
        name = key.hex()
        self.resident[name] = self.resident.get(name, 0) + 1

    def drop(self, engine_hash: EngineHash) -> bytes | None:
        key = self.keys.pop(engine_hash, None)
        if key is not None:
            name = key.hex()
            left = self.resident.get(name, 0) - 1
            if left > 0:
                self.resident[name] = left
            else:
                self.resident.pop(name, None)
        return key

    def forget(self) -> None:
        self.keys.clear()
        self.resident.clear()

    def depth(self, kv_keys: Sequence[str]) -> int:
        """How many of `kv_keys`, from the first, the replica holds."""
        held = self.resident
        n = 0
        for key in kv_keys:
            if key not in held:
                break
            n += 1
        return n


class KVIndexWriter:
    """Turns event batches into store writes; one instance per router replica, for every engine replica."""

    def __init__(self, store: Store, *, block_size: int, entry_ttl_s: float) -> None:
        self.store = store
        self.block_size = block_size
        self.entry_ttl_s = entry_ttl_s
        self.replicas: dict[str, ReplicaState] = {}
        self.applied = 0
        self.resets = 0

    async def join(self, replica: str, *, now: float, started_at: float | None = None) -> ReplicaState:
        """Starts following `replica`: adopts the epoch and block names others wrote, or opens an epoch.

        A new epoch is named after the engine's start time when known (every router replica joining
        at once then picks the same one), else after the current 10-second window."""
        epochs, names = await self.store.hgetall_many([EPOCH_KEY, map_key(replica)])
        state = ReplicaState()
        epoch = epochs.get(replica)
        if epoch:
            state.epoch = epoch.decode()
            for h, key in names.items():
                try:
                    value = bytes.fromhex(key.decode())
                    engine_hash: EngineHash = int(h)
                except ValueError:
                    try:
                        value, engine_hash = bytes.fromhex(key.decode()), bytes.fromhex(h)
                    except ValueError:
                        continue
                state.hold(engine_hash, value)
        else:
            name = f"start-{started_at:.3f}" if started_at is not None else f"join-{int(now // 10) * 10}"
            await self._new_epoch(replica, state, name)
        self.replicas[replica] = state
        return state

    async def leave(self, replica: str, *, now: float) -> None:
        """The replica is gone (no longer discovered): its entries stop counting for everyone, and stay void
        if it comes back (events it sent meanwhile were missed)."""
        self.replicas.pop(replica, None)
        await self.store.delete(map_key(replica))
        await self.store.hset(EPOCH_KEY, {replica: f"left-{now:.6f}".encode()}, EPOCH_TTL_S)

    def depths(self, kv_keys: Sequence[str]) -> dict[str, int]:
        """{replica: blocks of `kv_keys` it holds from the first} for every replica this writer follows: what
        `matched_depths` reads from the store, from this process's own copy of the same events (each router
        applies every replica's events itself, so its copy is the store's truth without the round trip)."""
        return {replica: state.depth(kv_keys) for replica, state in self.replicas.items() if state.epoch}

    async def _new_epoch(self, replica: str, state: ReplicaState, epoch: str) -> None:
        state.epoch = epoch
        state.forget()
        self.resets += 1
        await self.store.delete(map_key(replica))
        await self.store.hset(EPOCH_KEY, {replica: epoch.encode()}, EPOCH_TTL_S)

    async def apply(self, replica: str, seq: int, batch: KVEventBatch) -> None:
        """Applies one batch (in sequence order) from `replica`'s publisher."""
        state = self.replicas.get(replica)
        if state is None:
            state = await self.join(replica, now=batch.ts)
        if state.stale or (state.last_seq >= 0 and seq != state.last_seq + 1):
            why = ("a store write failed" if state.stale else "restarted" if seq <= state.last_seq
                   else f"missed {seq - state.last_seq - 1} batches")
            log.info("KV events of %s: %s; dropping what the index knew of it", replica, why)
            await self._new_epoch(replica, state, f"{batch.ts:.6f}")
            state.stale = False
        state.last_seq = seq
        try:
            await self._apply(replica, state, batch)
        except Exception:
            state.stale = True
            raise
        self.applied += 1

    async def _apply(self, replica: str, state: ReplicaState, batch: KVEventBatch) -> None:
        ops: list[HashOp] = []
        names: dict[str, bytes] = {}
        epoch = state.epoch.encode()
        for event in batch.events:
            if isinstance(event, AllBlocksCleared):
                if ops:
                    await self.store.hbatch(ops, self.entry_ttl_s)
                    ops = []
                await self._new_epoch(replica, state, f"{batch.ts:.6f}")
                epoch = state.epoch.encode()
            elif isinstance(event, BlockStored):
                ops += self._stored(replica, state, event, epoch, names)
            elif isinstance(event, BlockRemoved):
                gone = [h for h in event.block_hashes if h in state.keys]
                for h in gone:
                    key = state.drop(h)
                    if key is not None:
                        ops.append(("del", KEY_PREFIX + key.hex(), [replica]))
                    names.pop(_hash_field(h), None)
                if gone:
                    ops.append(("del", map_key(replica), [_hash_field(h) for h in gone]))
        if names:
            ops.append(("set", map_key(replica), names))
        if ops:
            await self.store.hbatch(ops, self.entry_ttl_s)

    def _stored(self, replica: str, state: ReplicaState, event: BlockStored, epoch: bytes,
                names: dict[str, bytes]) -> list[HashOp]:
        size = event.block_size
        if size != self.block_size:
            if state.other_block_size != size:
                log.warning("KV events of %s use blocks of %d tokens, the router %d: not indexed (set "
                            "router.kv_events.block_size to the engines' page size)", replica, size, self.block_size)
                state.other_block_size = size
            return []
        if event.parent_block_hash is None:
            previous: bytes | None = lora_seed(event.lora_id)
        else:
            previous = state.keys.get(event.parent_block_hash)
        if previous is None:  # the parent was stored before this router followed the replica: unknown prefix
            return []
        ops: list[HashOp] = []
        tokens = event.token_ids
        for i, h in enumerate(event.block_hashes):
            chunk = tokens[i * size : (i + 1) * size]
            if len(chunk) < size:
                break
            previous = next_key(previous, chunk)
            state.hold(h, previous)
            names[_hash_field(h)] = previous.hex().encode()
            ops.append(("set", KEY_PREFIX + previous.hex(), {replica: epoch}))
        return ops
