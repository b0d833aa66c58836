"""The engine's side: KV-cache event batches out on a ZeroMQ PUB socket, as SGLang's publisher sends them.

Frames per message: topic, 8-byte big-endian sequence number (from 0 at every start, so a
subscriber sees a restart as the sequence going back), msgpack payload. The engine thread only
queues a batch; a daemon thread encodes and sends, so a slow network never stalls a step (at the
high-water mark ZeroMQ drops messages; the subscriber sees the gap in the sequence). With a
replay endpoint, a ROUTER socket answers `[identity, b"", start_seq]` with every buffered batch
from that sequence on, then `(-1, b"")`, as SGLang's does.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque

import zmq

from macaron.kv_events.wire import KVEventBatch, KVEventsConfig, encode_batch

log = logging.getLogger(__name__)
END_SEQ = (-1).to_bytes(8, "big", signed=True)


def _binds(endpoint: str) -> bool:
    """SGLang's rule: a wildcard or local transport binds; an address with a host name connects."""
    return "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))


class ZmqEventPublisher:
    """Publishes KVEventBatch objects; `publish` never blocks the caller."""

    def __init__(self, config: KVEventsConfig, context: zmq.Context | None = None) -> None:
        self.config = config
        # a context of its own: the process-wide `instance()` may be an asyncio one (a router in the same process)
        self._own_ctx = context is None
        self._ctx = context or zmq.Context()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.set_hwm(config.hwm)
        self._pub.setsockopt(zmq.LINGER, 0)
        (self._pub.bind if _binds(config.endpoint) else self._pub.connect)(config.endpoint)
        self.endpoint = self._pub.getsockopt_string(zmq.LAST_ENDPOINT) or config.endpoint
        """The bound address (the real port when the configured one was 0 or a wildcard)."""
        self._replay: zmq.Socket | None = None
        if config.replay_endpoint:
            self._replay = self._ctx.socket(zmq.ROUTER)
            self._replay.setsockopt(zmq.LINGER, 0)
            self._replay.bind(config.replay_endpoint)
        self._topic = config.topic.encode()
        self._queue: queue.Queue[KVEventBatch | None] = queue.Queue(maxsize=config.max_queue_size)
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        self._seq = 0
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="kv-events-publisher", daemon=True)
        self._thread.start()

    def publish(self, batch: KVEventBatch) -> None:
        """Queues one batch; a full queue drops it (counted; subscribers see the sequence gap)."""
        try:
            self._queue.put_nowait(batch)
        except queue.Full:
            self.dropped += 1

    def _send(self, batch: KVEventBatch) -> None:
        payload = encode_batch(batch)
        seq, self._seq = self._seq, self._seq + 1
        try:
            self._pub.send_multipart((self._topic, seq.to_bytes(8, "big"), payload), flags=zmq.NOBLOCK)
        except zmq.Again:
            self.dropped += 1
        self._buffer.append((seq, payload))

    def _serve_replay(self) -> None:
        assert self._replay is not None
        frames = self._replay.recv_multipart()
        if len(frames) != 3:
            log.warning("invalid KV-event replay request (%d frames)", len(frames))
            return
        client, _, start = frames
        first = int.from_bytes(start, "big")
        for seq, payload in list(self._buffer):
            if seq >= first:
                self._replay.send_multipart((client, b"", seq.to_bytes(8, "big"), payload))
        self._replay.send_multipart((client, b"", END_SEQ, b""))

    def _run(self) -> None:
        while True:
            if self._replay is not None and self._replay.poll(0):
                try:
                    self._serve_replay()
                except zmq.ZMQError as exc:
                    log.warning("KV-event replay failed: %s", exc)
            try:
                batch = self._queue.get(timeout=0.05)
            except queue.Empty:
                continue
            if batch is None:
                return
            try:
                self._send(batch)
            except Exception:  # noqa: BLE001 - the publisher thread never dies on one bad batch
                log.exception("publishing a KV-event batch failed")

    def close(self, timeout_s: float = 1.0) -> None:
        """Sends what is queued (up to `timeout_s`), then closes the sockets."""
        try:
            self._queue.put(None, timeout=timeout_s)
        except queue.Full:
            pass
        self._thread.join(timeout_s)
        self._pub.close(linger=0)
        if self._replay is not None:
            self._replay.close(linger=0)
        if self._own_ctx:
            self._ctx.term()
