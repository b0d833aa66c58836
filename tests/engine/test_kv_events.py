"""The embedded engine publishes its prefix cache as KV-cache events in SGLang's wire format, over ZeroMQ.

A real SUB socket reads what a real engine (the tiny model) publishes: the cleared cache at
start, BlockStored for every block that got a hash (parents chained, the adapter's lora_id, the
tokens), BlockRemoved once a small cache reuses a block; and the frames are topic, 8-byte
big-endian sequence, msgpack payload as SGLang's publisher sends them.
"""

from __future__ import annotations

import json
import time

import msgpack
import pytest
import zmq

from macaron.engine import GenerateRequest
from macaron.kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    WireError,
    decode_batch,
    encode_batch,
    lora_id_for,
)

from .helpers import greedy, make_engine, run_all


def test_wire_format_is_sglangs_tagged_arrays() -> None:
    batch = KVEventBatch(1.5, [BlockStored([11, 12], None, list(range(32)), 16, 7), BlockRemoved([11]), AllBlocksCleared()])
    raw = msgpack.unpackb(encode_batch(batch))
    assert raw == [1.5, [["BlockStored", [11, 12], None, list(range(32)), 16, 7], ["BlockRemoved", [11]],
                         ["AllBlocksCleared"]]]
    assert decode_batch(encode_batch(batch)) == batch
    # vLLM's extra fields (medium, data_parallel_rank) are accepted
    vllm = msgpack.packb([2.0, [["BlockStored", [b"\x01"], None, [1, 2], 2, None, "GPU"], ["BlockRemoved", [b"\x01"], "GPU"]], 0])
    assert decode_batch(vllm).events == [BlockStored([b"\x01"], None, [1, 2], 2, None), BlockRemoved([b"\x01"])]
    for bad in (b"\xc1", msgpack.packb({"ts": 1}), msgpack.packb([1.0, [["Nope"]]]), msgpack.packb([1.0, [["BlockStored", [1]]]])):
        with pytest.raises(WireError):
            decode_batch(bad)


def _drain(sub: zmq.Socket, until: float) -> list[tuple[bytes, int, KVEventBatch]]:
    out = []
    while time.monotonic() < until:
        if not sub.poll(50):
            if out:
                break
            continue
        topic, seq, payload = sub.recv_multipart()
        out.append((topic, int.from_bytes(seq, "big"), decode_batch(payload)))
    return out


def test_engine_publishes_stored_removed_and_cleared(tiny_assets) -> None:
    config = json.dumps({"publisher": "zmq", "endpoint": "tcp://127.0.0.1:*", "topic": "kv"})
    eng = make_engine(tiny_assets.model_dir, dict(tiny_assets.adapters), max_total_tokens=128, kv_block_size=16,
                      kv_events_config=config)
    sub = zmq.Context.instance().socket(zmq.SUB)
    try:
        sub.connect(eng.kv_events.endpoint)
        sub.setsockopt(zmq.SUBSCRIBE, b"kv")
        time.sleep(0.3)  # the slow-joiner window of PUB/SUB
        prompt = "def add(a, b):\n    return a + b\n" * 3
        run_all(eng, [GenerateRequest("r1", prompt, greedy(4), lora_path="code")])
        messages = _drain(sub, time.monotonic() + 5)
        assert messages and all(topic == b"kv" for topic, _, _ in messages)
        seqs = [seq for _, seq, _ in messages]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        stored = [e for _, _, b in messages for e in b.events if isinstance(e, BlockStored)]
        assert stored, "no BlockStored for a prompt of several blocks"
        assert stored[0].parent_block_hash is None and all(e.block_size == 16 and len(e.token_ids) == 16 for e in stored)
        assert all(e.lora_id == lora_id_for("code") for e in stored)
        for parent, child in zip(stored, stored[1:]):
            assert child.parent_block_hash == parent.block_hashes[-1]
        ids = eng.tokenizer.encode(prompt, add_special_tokens=False)
        assert stored[0].token_ids == ids[:16]
        # another prompt on a cache of 8 blocks reuses old blocks: they are reported removed
        run_all(eng, [GenerateRequest("r2", "SELECT * FROM users WHERE id = 7; " * 6, greedy(4))])
        later = [e for _, _, b in _drain(sub, time.monotonic() + 5) for e in b.events]
        removed = {h for e in later if isinstance(e, BlockRemoved) for h in e.block_hashes}
        assert removed & {h for e in stored for h in e.block_hashes}
    finally:
        sub.close(linger=0)
        eng.close()


def test_a_restarted_engine_starts_with_a_cleared_cache_and_sequence_zero(tiny_assets) -> None:
    config = json.dumps({"publisher": "zmq", "endpoint": "tcp://127.0.0.1:*"})
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    eng = make_engine(tiny_assets.model_dir, {}, max_total_tokens=128, kv_events_config=config)
    try:
        sub.connect(eng.kv_events.endpoint)
        time.sleep(0.3)
        eng.kv_events.publish(KVEventBatch(time.time(), [AllBlocksCleared()]))
        got = _drain(sub, time.monotonic() + 5)
        # seq 0 went to the start-up clear (whether or not this late subscriber saw it)
        assert got and got[-1][1] == 1 and all(b.events == [AllBlocksCleared()] for _, _, b in got)
    finally:
        sub.close(linger=0)
        eng.close()


def test_bad_config_is_refused(tiny_assets) -> None:
    with pytest.raises(ValueError, match="kv_events_config"):
        make_engine(tiny_assets.model_dir, {}, max_total_tokens=128, kv_events_config="{not json")
    with pytest.raises(ValueError, match="unknown publisher"):
        make_engine(tiny_assets.model_dir, {}, max_total_tokens=128, kv_events_config='{"publisher": "kafka"}')
