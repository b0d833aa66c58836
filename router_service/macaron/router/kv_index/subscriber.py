"""Follows every replica's KV-cache event publisher (ZeroMQ SUB) and feeds the index writer.

Every `refresh_s` the replica list is read again: a new replica's publisher is found (a template,
or the replica's /get_server_info) and a SUB socket connected to it, one per replica so every
batch is known to come from its replica; a replica no longer discovered is dropped from the
index. Replicas that publish nothing are reported through `on_plain` with their start time,
for the approximate index (a restart there forgets what was sent to them).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, Awaitable, Callable, Sequence
from urllib.parse import urlsplit

import zmq
import zmq.asyncio

from macaron.kv_events.wire import WireError, decode_batch
from macaron.router.kv_index.index import KVIndexWriter
from macaron.router.kv_index.settings import KVIndexSettings
from macaron.store import StoreUnavailableError

log = logging.getLogger(__name__)


def _events_config(info: dict[str, Any]) -> dict[str, Any] | None:
    """The replica's `kv_events_config` (SGLang's server args keep the JSON text), when it publishes over ZeroMQ."""
    raw = info.get("kv_events_config")
    if not raw:
        return None
    try:
        config = json.loads(raw) if isinstance(raw, str) else dict(raw)
    except (ValueError, TypeError):
        return None
    return config if config.get("publisher", "null") == "zmq" else None


def _endpoint_of(replica: str, info: dict[str, Any], template: str, info_key: str, config_key: str,
                 default: str | None) -> str | None:
    """One ZeroMQ address of `replica`: the template, else the server info's own key, else its events config."""
    host = urlsplit(replica).hostname or "127.0.0.1"
    if template:
        return template.format(host=host)
    endpoint = info.get(info_key)
    if not endpoint:
        config = _events_config(info)
        endpoint = (config.get(config_key) or default) if config is not None else None
    return _reachable(str(endpoint), host) if endpoint else None


def publisher_of(replica: str, info: dict[str, Any], template: str = "") -> str | None:
    """The ZeroMQ address of `replica`'s publisher, or None when it publishes nothing."""
    return _endpoint_of(replica, info, template, "kv_events_endpoint", "endpoint", "tcp://*:5557")


def replay_of(replica: str, info: dict[str, Any], template: str = "") -> str | None:
    """The ZeroMQ address of `replica`'s replay socket, or None when it has none."""
    return _endpoint_of(replica, info, template, "kv_events_replay_endpoint", "replay_endpoint", None)


async def fetch_replay(ctx: zmq.asyncio.Context, endpoint: str, start: int, timeout_s: float
                       ) -> list[tuple[int, bytes]]:
    """The publisher's buffered batches from sequence `start` on, as SGLang's replay socket sends them: a DEALER
    asks with `[b"", start]` (8 bytes, big-endian) and reads `[b"", seq, payload]` until seq is -1. Raises
    TimeoutError when the replay does not end within `timeout_s`."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(endpoint)
        out: list[tuple[int, bytes]] = []
        async with asyncio.timeout(timeout_s):
            await sock.send_multipart((b"", start.to_bytes(8, "big")))
            while True:
                frames = await sock.recv_multipart()
                if len(frames) != 3:
                    continue
                seq = int.from_bytes(frames[1], "big", signed=True)
                if seq < 0:
                    return out
                out.append((seq, frames[2]))
    finally:
        sock.close(linger=0)


def _reachable(endpoint: str, host: str) -> str:
    """A bound wildcard address made reachable: its host replaced by the replica's."""
    scheme, sep, rest = endpoint.partition("://")
    if scheme != "tcp" or not sep:
        return str(endpoint)  # ipc:// and inproc:// are only reachable on the same host; taken as they are
    addr, _, port = rest.rpartition(":")
    if addr in ("*", "0.0.0.0", "[::]", "::", ""):
        addr = f"[{host}]" if ":" in host else host
    return f"tcp://{addr}:{port}"


class KVEventFollower:
    """One SUB socket and one reader task per publishing replica."""

    def __init__(self, settings: KVIndexSettings, writer: KVIndexWriter,
                 replicas: Callable[[], Awaitable[Sequence[str]]],
                 server_info: Callable[[str], Awaitable[dict[str, Any]]],
                 on_plain: Callable[[str, float | None], None] | None = None,
                 on_restart: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self.writer = writer
        self._replicas = replicas
        self._server_info = server_info
        self.on_plain = on_plain
        self.on_restart = on_restart
        """Called with a followed replica that restarted (it may have lost what was loaded at run time)."""
        self._ctx = zmq.asyncio.Context()  # its own: `instance()` may be a plain context made by someone else
        self.readers: dict[str, tuple[zmq.asyncio.Socket, asyncio.Task[None]]] = {}
        self.plain: set[str] = set()
        self._followed: dict[str, tuple[str, float | None]] = {}
        self.replays: dict[str, str] = {}
        """Each followed replica's replay socket, where it has one."""
        self.replayed = 0
        """Batches recovered from replay sockets (gaps closed without a new epoch)."""
        self.decode_errors = 0
        self.capacity: dict[str, int] = {}
        """Each replica's KV-cache tokens (`max_total_num_tokens` of its server info, SGLang's and the embedded
        engine's), for placement's cache-pressure check; absent where the replica reports none."""
        self._task: asyncio.Task[None] | None = None
        self.current: frozenset[str] = frozenset()
        """The replicas of the last refresh."""

    def follows_all(self) -> bool:
        """Whether every replica of the last refresh publishes KV-cache events and is followed: engine truth then
        covers all of them, and the approximate index has nothing to add."""
        current = self.current
        return bool(current) and not self.plain and all(r in self.readers for r in current)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="kv-event-follower")

    async def refresh(self) -> None:
        """Follows new replicas, re-follows restarted ones, drops vanished ones (every refresh_s)."""
        try:
            current = set(await self._replicas())
        except Exception as exc:  # noqa: BLE001 - discovery errors are the discovery's to report
            log.debug("no replicas for the KV index: %s", exc)
            return
        self.current = frozenset(current)
        for replica in list(self.readers):
            if replica not in current:
                self._stop_reader(replica)
                try:
                    await self.writer.leave(replica, now=time.time())
                except StoreUnavailableError:
                    pass
        self.plain &= current
        for replica in [r for r in self.capacity if r not in current]:
            del self.capacity[replica]
        ordered = sorted(current)
        infos = await asyncio.gather(*(self._info(r) for r in ordered))
        for replica, info in zip(ordered, infos):
            if info is None:
                continue
            total = info.get("max_total_num_tokens")
            if isinstance(total, int) and total > 0:
                self.capacity[replica] = total
            start = info.get("startup_time")
            start = float(start) if isinstance(start, (int, float)) else None
            endpoint = publisher_of(replica, info, self.settings.endpoint)
            if endpoint is None:
                if replica in self.readers:
                    self._stop_reader(replica)
                self.plain.add(replica)
                if self.on_plain is not None:
                    self.on_plain(replica, start)
                continue
            self.plain.discard(replica)
            known = self._followed.get(replica)
            if known is not None and known == (endpoint, start):
                continue
            if replica in self.readers:  # restarted, or its publisher moved: what was known of it is void
                log.info("replica %s restarted (publisher %s): following it again", replica, endpoint)
                self._stop_reader(replica)
                state = self.writer.replicas.get(replica)
                if state is not None:
                    state.stale = True
                if self.on_restart is not None:
                    self.on_restart(replica)
            if replica not in self.writer.replicas:  # precise from now on, even before its first event
                try:
                    await self.writer.join(replica, now=time.time(), started_at=start)
                except StoreUnavailableError:
                    continue
            self._follow(replica, endpoint)
            self._followed[replica] = (endpoint, start)
            replay = replay_of(replica, info, self.settings.replay_endpoint)
            if replay is not None:
                self.replays[replica] = replay
            else:
                self.replays.pop(replica, None)

    async def _info(self, replica: str) -> dict[str, Any] | None:
        try:
            return await asyncio.wait_for(self._server_info(replica), self.settings.timeout_s)
        except Exception as exc:  # noqa: BLE001 - a replica that does not answer is tried again later
            log.debug("cannot read the server info of %s: %s", replica, exc)
            return None

    def _follow(self, replica: str, endpoint: str) -> None:
        sock = self._ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SUBSCRIBE, self.settings.topic.encode())
        sock.connect(endpoint)
        task = asyncio.get_running_loop().create_task(self._read(replica, sock), name=f"kv-events {replica}")
        self.readers[replica] = (sock, task)
        log.info("following the KV-cache events of %s at %s", replica, endpoint)

    async def _read(self, replica: str, sock: zmq.asyncio.Socket) -> None:
        while True:
            frames = await sock.recv_multipart()
            if len(frames) != 3:
                self.decode_errors += 1
                continue
            _, seq, payload = frames
            await self.handle(replica, int.from_bytes(seq, "big"), payload)

    async def handle(self, replica: str, seq: int, payload: bytes) -> None:
        """One batch from `replica`'s publisher; a skipped sequence is first filled from its replay socket."""
        try:
            batch = decode_batch(payload)
        except WireError as exc:
            self.decode_errors += 1
            log.warning("KV events of %s: %s", replica, exc)
            return
        try:
            state = self.writer.replicas.get(replica)
            if state is not None and not state.stale and 0 <= state.last_seq < seq - 1:
                await self._fill_gap(replica, state.last_seq + 1, seq)
            await self.writer.apply(replica, seq, batch)
        except StoreUnavailableError:
            pass  # the writer starts a new epoch with the next batch
        except Exception:  # noqa: BLE001 - one bad batch never stops the reader
            log.exception("indexing the KV events of %s failed", replica)

    async def _fill_gap(self, replica: str, first: int, upto: int) -> None:
        """Applies batches first..upto-1 from the replay socket, when it still holds all of them; otherwise
        applies none (the writer then sees the gap and starts a new epoch for the replica)."""
        endpoint = self.replays.get(replica)
        if endpoint is None:
            return
        try:
            replayed = await fetch_replay(self._ctx, endpoint, first, self.settings.timeout_s)
        except (TimeoutError, zmq.ZMQError) as exc:
            log.info("KV events of %s: no replay of %d..%d (%s)", replica, first, upto - 1, exc)
            return
        wanted = [(s, p) for s, p in replayed if first <= s < upto]
        if [s for s, _ in wanted] != list(range(first, upto)):
            log.info("KV events of %s: the replay no longer holds %d..%d", replica, first, upto - 1)
            return
        batches = []
        for _, payload in wanted:
            try:
                batches.append(decode_batch(payload))
            except WireError:
                self.decode_errors += 1
                return
        for s, batch in zip(range(first, upto), batches):
            await self.writer.apply(replica, s, batch)
        self.replayed += len(batches)
        log.info("KV events of %s: %d missed batches replayed", replica, len(batches))

    def _stop_reader(self, replica: str) -> None:
        self._followed.pop(replica, None)
        sock, task = self.readers.pop(replica)
        task.cancel()
        sock.close(linger=0)

    async def _run(self) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(self.settings.refresh_s)

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=1.0)
            self._task = None
        tasks = [task for _, task in self.readers.values()]
        for replica in list(self.readers):
            self._stop_reader(replica)
        if tasks:
            await asyncio.wait(tasks, timeout=1.0)
        self._ctx.term()
