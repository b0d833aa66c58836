"""The KV-cache event wire format of SGLang's and vLLM's `kv_events` modules, in msgpack.

Both engines define the events as msgspec structs with `array_like=True, tag=True,
omit_defaults=True`, so on the wire every event is a msgpack array whose first element is the
struct's name, followed by its fields in order; a batch is `[ts, [event, ...]]` (vLLM may append
`data_parallel_rank` when it is set). Fields:

- `["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id]`
  (vLLM appends `medium`);
- `["BlockRemoved", block_hashes]` (vLLM appends `medium`);
- `["AllBlocksCleared"]`.

A message on the PUB socket has three frames: topic, an 8-byte big-endian sequence number, the
msgpack payload. Block hashes are whatever the engine uses (ints; vLLM may send bytes): they
name blocks for later removal, while what a block holds is read from its `token_ids`.
"""

from __future__ import annotations

import functools
import hashlib
import time
from dataclasses import dataclass, field
from typing import Any, Union

import msgpack
from pydantic import BaseModel, ConfigDict, Field

EngineHash = Union[int, bytes]


class WireError(ValueError):
    """A message that is not a KV-event batch in the SGLang/vLLM format."""


@dataclass(frozen=True, slots=True)
class BlockStored:
    """Full blocks entered the prefix cache; each block's parent is the block before it."""

    block_hashes: list[EngineHash]
    parent_block_hash: EngineHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None = None


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """Blocks left the prefix cache (evicted)."""

    block_hashes: list[EngineHash]


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    """The whole prefix cache was dropped (flush, restart)."""


Event = Union[BlockStored, BlockRemoved, AllBlocksCleared]


@dataclass(frozen=True, slots=True)
class KVEventBatch:
    """The events of one engine step, in order."""

    ts: float
    events: list[Event] = field(default_factory=list)


@functools.lru_cache(maxsize=4096)
def lora_id_for(adapter_name: str) -> int | None:
    """The `lora_id` the embedded engine publishes for an adapter name (None for the base model).

    A stable 63-bit number, so a router computes the same id from the adapter's engine name
    (`code@v3`) without asking the engine."""
    if not adapter_name:
        return None
    return int.from_bytes(hashlib.blake2b(adapter_name.encode(), digest_size=8).digest(), "big") >> 1


def _event_array(event: Event) -> list[Any]:
    if isinstance(event, BlockStored):
        return ["BlockStored", list(event.block_hashes), event.parent_block_hash, list(event.token_ids),
                event.block_size, event.lora_id]
    if isinstance(event, BlockRemoved):
        return ["BlockRemoved", list(event.block_hashes)]
    if isinstance(event, AllBlocksCleared):
        return ["AllBlocksCleared"]
    raise TypeError(f"not a KV-cache event: {event!r}")


def encode_batch(batch: KVEventBatch) -> bytes:
    """The msgpack payload of one batch, as SGLang's publisher encodes it."""
    return msgpack.packb([float(batch.ts), [_event_array(e) for e in batch.events]], use_bin_type=True)


def _hashes(value: Any, what: str) -> list[EngineHash]:
    if not isinstance(value, list) or not all(isinstance(h, (int, bytes)) for h in value):
        raise WireError(f"{what}: block_hashes must be a list of ints or bytes")
    return value


def _event(raw: Any) -> Event:
    if not isinstance(raw, list) or not raw or not isinstance(raw[0], str):
        raise WireError(f"an event must be an array tagged with its name, got {type(raw).__name__}")
    tag, fields = raw[0], raw[1:]
    if tag == "BlockStored":
        if len(fields) < 4:
            raise WireError(f"BlockStored needs at least 4 fields, got {len(fields)}")
        hashes, parent, tokens, size = fields[:4]
        lora_id = fields[4] if len(fields) > 4 else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise WireError("BlockStored: token_ids must be a list of ints")
        if not isinstance(size, int) or size <= 0:
            raise WireError("BlockStored: block_size must be a positive int")
        if parent is not None and not isinstance(parent, (int, bytes)):
            raise WireError("BlockStored: parent_block_hash must be an int, bytes or nil")
        if lora_id is not None and not isinstance(lora_id, int):
            raise WireError("BlockStored: lora_id must be an int or nil")
        return BlockStored(_hashes(hashes, tag), parent, tokens, size, lora_id)
    if tag == "BlockRemoved":
        if not fields:
            raise WireError("BlockRemoved needs block_hashes")
        return BlockRemoved(_hashes(fields[0], tag))
    if tag == "AllBlocksCleared":
        return AllBlocksCleared()
    raise WireError(f"unknown KV-cache event {tag!r}")


def decode_batch(payload: bytes) -> KVEventBatch:
    """One batch from its msgpack payload; WireError when it is not one."""
    try:
        raw = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise WireError(f"not msgpack: {exc}") from exc
    if not isinstance(raw, list) or len(raw) < 2 or not isinstance(raw[0], (int, float)) or not isinstance(raw[1], list):
        raise WireError("a batch must be [ts, [events...]]")
    return KVEventBatch(float(raw[0]), [_event(e) for e in raw[1]])


def now_batch(events: list[Event]) -> KVEventBatch:
    return KVEventBatch(time.time(), events)


class KVEventsConfig(BaseModel):
    """SGLang's `--kv-events-config` JSON (the same fields and defaults)."""

    model_config = ConfigDict(extra="ignore")

    publisher: str = Field("null", description="'zmq' publishes; 'null' does not.")
    endpoint: str = Field("tcp://*:5557", description="PUB address: a wildcard host binds, a named host connects.")
    replay_endpoint: str | None = Field(None, description="ROUTER address where subscribers ask for missed batches.")
    buffer_steps: int = Field(10_000, description="Batches kept for replay.")
    hwm: int = Field(100_000, description="ZeroMQ high-water mark of the PUB socket.")
    max_queue_size: int = Field(100_000, description="Batches queued for the publisher thread.")
    topic: str = Field("", description="Topic frame of every message.")

    @classmethod
    def from_cli(cls, value: str) -> "KVEventsConfig":
        return cls.model_validate_json(value)
