"""Forwarding to the specialist pools: client-side balancing, retry before the first chunk only.

Each pool is a list of gRPC targets. A `host:port` target gets its own channel and the router
picks among them (fewest streams in flight from this router, ties in turn); a `dns:///name:port`
target (a headless Service) is one channel whose `round_robin` policy spreads calls over every
address the name resolves to. A call that fails with UNAVAILABLE or RESOURCE_EXHAUSTED before
its first chunk is retried on another target (on a dns target, the balancer moves on by
itself), up to `max_attempts` and within the caller's deadline; once a chunk went out, an error
is the caller's. A `serve:NAME` target is a Ray Serve deployment reached through the channel
factory the caller gives (Serve balances its replicas, so it may repeat like a dns target). The internal token goes with every call, over TLS when configured. Deadlines propagate (the remaining time becomes the call's timeout), so does
cancellation (closing the stream cancels the call), and so do trace context and request id.
"""

from __future__ import annotations

import itertools
import time
from typing import Any, AsyncIterator, Callable, Mapping, Sequence

import grpc

from macaron.v1 import common_pb2, specialist_pb2_grpc

RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED})
CHANNEL_OPTIONS: list[tuple[str, object]] = [
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.enable_retries", 0),  # retries are ours: only before the first chunk
]
SERVE_PREFIX = "serve:"
BALANCED_PREFIXES = ("dns:", SERVE_PREFIX)
"""Targets that spread calls over several replicas themselves, so a retry may reuse them."""
ChannelFactory = Callable[[str], Any]
"""Makes the channel of a `serve:` target (an object with grpc.aio.Channel's unary_stream and close)."""


class Pool:
    """One specialist pool's targets and channels."""

    def __init__(self, name: str, targets: Sequence[str], credentials: grpc.ChannelCredentials | None = None,
                 channel_options: Sequence[tuple[str, Any]] = (), channel_factory: ChannelFactory | None = None) -> None:
        if not targets:
            raise ValueError(f"specialist pool {name} has no target")
        self.name = name
        self.targets = list(targets)
        self.channels = [
            channel_factory(t) if channel_factory is not None and t.startswith(SERVE_PREFIX)
            else self._channel(t, credentials, list(channel_options))
            for t in self.targets
        ]
        self.stubs = [specialist_pb2_grpc.SpecialistStub(ch) for ch in self.channels]
        self.in_flight = [0] * len(self.targets)
        self._turn = itertools.count()

    @staticmethod
    def _channel(target: str, credentials: grpc.ChannelCredentials | None, extra: list[tuple[str, Any]]) -> grpc.aio.Channel:
        options = CHANNEL_OPTIONS + extra + ([("grpc.lb_policy_name", "round_robin")] if target.startswith("dns:") else [])
        if credentials is None:
            return grpc.aio.insecure_channel(target, options=options)
        return grpc.aio.secure_channel(target, credentials, options=options)

    def choose(self, tried: set[int]) -> int | None:
        """The target for the next attempt: untried, fewest in flight, ties in turn; a dns target may repeat."""
        left = [i for i in range(len(self.targets)) if i not in tried]
        if not left:
            left = [i for i in tried if self.targets[i].startswith(BALANCED_PREFIXES)]
            if not left:
                return None
        least = min(self.in_flight[i] for i in left)
        tied = [i for i in left if self.in_flight[i] == least]
        return tied[next(self._turn) % len(tied)]

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close()


class Forwarder:
    """Streams a request from the chosen specialist pool."""

    def __init__(self, pools: Mapping[str, Sequence[str]], *, max_attempts: int = 3,
                 on_retry: Callable[[str, grpc.StatusCode], None] | None = None,
                 credentials: grpc.ChannelCredentials | None = None,
                 channel_options: Sequence[tuple[str, Any]] = (), internal_token: str | None = None,
                 channel_factory: ChannelFactory | None = None) -> None:
        self.pools = {name: Pool(name, targets, credentials, channel_options, channel_factory)
                      for name, targets in pools.items()}
        self._auth: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {internal_token}"),) if internal_token else ()
        self.max_attempts = max(1, max_attempts)
        self.on_retry = on_retry

    async def stream(
        self,
        specialist: str,
        request: common_pb2.GenerateRequest,
        *,
        timeout_s: float,
        metadata: Sequence[tuple[str, str]] = (),
    ) -> AsyncIterator[common_pb2.GenerateChunk]:
        """The pool's chunks; raises grpc.aio.AioRpcError with the specialist's status."""
        pool = self.pools[specialist]
        deadline = time.monotonic() + timeout_s
        tried: set[int] = set()
        attempt = 0
        while True:
            index = pool.choose(tried)
            assert index is not None  # the first attempt always has a target
            attempt += 1
            call = pool.stubs[index].Generate(request, timeout=max(0.001, deadline - time.monotonic()),
                                              metadata=tuple(metadata) + self._auth)
            pool.in_flight[index] += 1
            try:
                try:
                    first = await call.read()
                except grpc.aio.AioRpcError as exc:
                    tried.add(index)
                    if (exc.code() in RETRYABLE and attempt < self.max_attempts
                            and deadline - time.monotonic() > 0.01 and pool.choose(tried) is not None):
                        if self.on_retry is not None:
                            self.on_retry(specialist, exc.code())
                        continue
                    raise
                if first is grpc.aio.EOF:
                    return
                yield first
                while True:
                    chunk = await call.read()
                    if chunk is grpc.aio.EOF:
                        return
                    yield chunk
            finally:
                pool.in_flight[index] -= 1
                if not call.done():
                    call.cancel()

    async def close(self) -> None:
        for pool in self.pools.values():
            await pool.close()
