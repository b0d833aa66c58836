"""KV-cache events: what an engine's prefix cache holds, published over ZeroMQ as SGLang and vLLM do.

`wire` is the message format (msgpack, SGLang's `kv_events` structs), `publisher` the engine's
ZeroMQ PUB side; the router's indexer (`macaron.router.kv_index`) subscribes.
"""

from macaron.kv_events.wire import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    KVEventsConfig,
    WireError,
    decode_batch,
    encode_batch,
    lora_id_for,
)

__all__ = [
    "AllBlocksCleared",
    "BlockRemoved",
    "BlockStored",
    "KVEventBatch",
    "KVEventsConfig",
    "WireError",
    "decode_batch",
    "encode_batch",
    "lora_id_for",
]
