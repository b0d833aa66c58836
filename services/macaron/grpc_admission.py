"""Admission control for a grpc.aio server: at most `max_in_flight` calls of the limited methods at once.

One more call is answered at once with RESOURCE_EXHAUSTED, google.rpc.RetryInfo and a
`retry-after-ms` trailer (what the SDK's `RateLimitError.retry_after_s` reads), before the
servicer runs: no authentication, routing or forwarding is spent on it. A stream holds its slot
until it ends, fails or is cancelled. grpc's own `maximum_concurrent_rpcs` server option does the
counting too, but it counts every method (health checks and reflection included, so a full
router would look dead to its probes) and its refusal carries no retry information.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from typing import Any

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from prometheus_client import CollectorRegistry, Counter, Gauge

from macaron.admission import AdmissionSettings, InFlightLimit, overloaded_message
from macaron.sdk._constants import RETRY_AFTER_MS_KEY


def overloaded_status(message: str, retry_after_s: float) -> tuple[grpc.StatusCode, str, tuple[tuple[str, str | bytes], ...]]:
    """(code, details, trailing metadata) of RESOURCE_EXHAUSTED with RetryInfo and retry-after-ms."""
    delay_ms = max(1, int(retry_after_s * 1000))
    delay = duration_pb2.Duration()
    delay.FromMilliseconds(delay_ms)
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
    converted = rpc_status.to_status(status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED, message=message, details=[detail]))
    return converted.code, converted.details, (*converted.trailing_metadata, (RETRY_AFTER_MS_KEY, str(delay_ms)))


class AdmissionInterceptor(grpc.aio.ServerInterceptor):
    """Bounds the in-flight calls of `methods` (full names, `/package.Service/Method`); the rest pass untouched.

    Metrics (in `registry`, named `<prefix>_admission_*`): the limit, the calls in flight, the refusals.
    """

    def __init__(self, settings: AdmissionSettings, methods: Collection[str], *,
                 registry: CollectorRegistry | None = None, metric_prefix: str = "macaron") -> None:
        self.settings = settings
        self.methods = frozenset(methods)
        self.limit = InFlightLimit(settings.max_in_flight)
        self.limit_gauge = Gauge(f"{metric_prefix}_admission_limit", "Calls this replica serves at once (0: no limit).",
                                 registry=registry)
        self.in_flight = Gauge(f"{metric_prefix}_admission_in_flight", "Admitted calls not finished (a stream until it ends).",
                               registry=registry)
        self.rejected = Counter(f"{metric_prefix}_admission_rejected", "Calls refused at once with RESOURCE_EXHAUSTED "
                                "because max_in_flight calls were running.", ["method"], registry=registry)
        self.limit_gauge.set(settings.max_in_flight)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method not in self.methods or self.settings.max_in_flight == 0:
            return handler
        if handler.unary_unary is not None:
            return handler._replace(unary_unary=self._unary(handler.unary_unary, method))
        if handler.unary_stream is not None:
            return handler._replace(unary_stream=self._stream(handler.unary_stream, method))
        return handler  # client-streaming methods: none is limited

    async def _refuse(self, context: grpc.aio.ServicerContext, method: str) -> None:
        self.rejected.labels(method=method).inc()
        retry_after = self.limit.retry_after_s(self.settings)
        code, details, trailers = overloaded_status(overloaded_message(self.limit, retry_after), retry_after)
        await context.abort(code, details, trailing_metadata=trailers)

    def _acquired(self) -> None:
        self.in_flight.set(self.limit.in_flight)

    def _released(self, started: float) -> None:
        self.limit.release(time.monotonic() - started)
        self.in_flight.set(self.limit.in_flight)

    def _unary(self, behavior: Callable[..., Awaitable[Any]], method: str) -> Callable[..., Awaitable[Any]]:
        async def admitted(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if not self.limit.try_acquire():
                await self._refuse(context, method)
            self._acquired()
            started = time.monotonic()
            try:
                return await behavior(request, context)
            finally:
                self._released(started)

        return admitted

    def _stream(self, behavior: Callable[..., Any], method: str) -> Callable[..., AsyncIterator[Any]]:
        async def admitted(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            if not self.limit.try_acquire():
                await self._refuse(context, method)
            self._acquired()
            started = time.monotonic()
            try:
                result = behavior(request, context)
                if hasattr(result, "__aiter__"):
                    async for item in result:
                        yield item
                else:  # a coroutine that writes with context.write
                    await result
            finally:
                self._released(started)

        return admitted


__all__ = ["AdmissionInterceptor", "overloaded_status"]
