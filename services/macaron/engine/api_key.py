"""SGLang's `--api-key` for the embedded engine: a bearer key on every path but health and metrics.

Same rule and answer as SGLang's middleware, so one engine client and one chart serve both:
`Authorization: Bearer <key>` is required on every request except OPTIONS, `/health*`,
`/ready` and `/metrics` (probes and Prometheus); anything else without it is
401 `{"error": "Unauthorized"}`.
"""

from __future__ import annotations

import hmac

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from macaron.auth.guard import InsecureBindError, is_loopback

OPEN_PATHS = ("/health", "/ready", "/metrics")


def check_engine_bind(host: str, api_key: str | None) -> None:
    """Raises InsecureBindError for a non-loopback engine without a key: it could unload adapters,
    abort every request or generate for anyone who reaches the port."""
    if not api_key and not is_loopback(host):
        raise InsecureBindError(
            f"refusing to serve the engine on {host} without --api-key (engine.api_key; from a Secret: "
            "MACARON_ENGINE__API_KEY), or bind it to 127.0.0.1"
        )


class ApiKeyMiddleware:
    """Pure ASGI (streams pass untouched): 401 unless the bearer key matches."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self._expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] == "OPTIONS" or scope["path"].startswith(OPEN_PATHS):
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope.get("headers", []) if k == b"authorization"), b"")
        if not hmac.compare_digest(given, self._expected):
            await JSONResponse({"error": "Unauthorized"}, status_code=401)(scope, receive, send)
            return
        await self.app(scope, receive, send)
