"""The gateway's front door: at most `gateway.admission.max_in_flight` completions at once, the excess refused at once.

A pure ASGI middleware in front of the routes: a refused request is answered before its body is
read, before auth, validation, routing or any queue (429, `Retry-After`, OpenAI's error body with
type `rate_limit_error` and code `server_overloaded`). An admitted request holds its slot until
the app returns, that is until the last byte of a stream or the client's disconnect. Retry-After
is about when a slot frees up (the recent time a request held one over the limit), at least
`retry_after_s`. Only the
work endpoints count; health, readiness, models, stats and metrics always answer.
"""

from __future__ import annotations

import time

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from macaron.admission import AdmissionSettings, InFlightLimit, overloaded_message
from macaron.gateway.errors import GatewayError
from macaron.gateway.metrics import GatewayMetrics

LIMITED_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})
"""The endpoints that start model work; everything else is cheap and stays reachable under overload."""
OVERLOADED_CODE = "server_overloaded"


class AdmissionMiddleware:
    """Bounds the work endpoints' requests in flight; answers one more with 429 at once."""

    def __init__(self, app: ASGIApp, settings: AdmissionSettings, metrics: GatewayMetrics) -> None:
        self.app = app
        self.settings = settings
        self.limit = InFlightLimit(settings.max_in_flight)
        self.metrics = metrics
        metrics.admission_limit.set(settings.max_in_flight)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("path") not in LIMITED_PATHS:
            await self.app(scope, receive, send)
            return
        if not self.limit.try_acquire():
            self.metrics.admission_rejected.labels(path=scope["path"]).inc()
            await self._refuse(send)
            return
        self.metrics.admission_in_flight.set(self.limit.in_flight)
        started = time.monotonic()
        try:
            await self.app(scope, receive, send)
        finally:
            self.limit.release(time.monotonic() - started)
            self.metrics.admission_in_flight.set(self.limit.in_flight)

    async def _refuse(self, send: Send) -> None:
        retry_after = self.limit.retry_after_s(self.settings)
        error = GatewayError(429, overloaded_message(self.limit, retry_after), type="rate_limit_error",
                             code=OVERLOADED_CODE, retry_after_s=retry_after)
        # The unread body is discarded by the server; the connection stays open for the client's retry.
        response = JSONResponse(error.body(), status_code=429, headers=error.headers())
        await response({"type": "http"}, _no_receive, send)


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}


__all__ = ["AdmissionMiddleware", "LIMITED_PATHS", "OVERLOADED_CODE"]
