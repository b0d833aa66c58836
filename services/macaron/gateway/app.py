"""`create_app(settings)`: the OpenAI-compatible REST gateway in front of the L0 router.

The app reaches the router only through the SDK (`AsyncMacaronClient`), so every REST request
exercises it. Auth and per-key limits use the shared `macaron.auth.Guard` (keys as hashes,
limits counted in Redis or the in-process store). Nothing lives at module level: tests and
`macaron serve` build as many apps as they like.
"""

from __future__ import annotations

import logging
import time
from contextlib import asynccontextmanager
from importlib import metadata
from typing import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from opentelemetry import context as otel_context
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from macaron import telemetry
from macaron.auth import Guard, resolve_dev_mode
from macaron.config import MacaronSettings
from macaron.gateway import protocol as p
from macaron.gateway import protocol_completions as pc
from macaron.gateway.admission import AdmissionMiddleware
from macaron.gateway.deadline import RECEIVED_AT_KEY
from macaron.gateway.errors import GatewayError, from_validation
from macaron.gateway.metrics import GatewayMetrics
from macaron.gateway.routes import router
from macaron.gateway.serving_chat import ChatService
from macaron.gateway.serving_completions import CompletionService
from macaron.gateway.settings import GatewaySettings
from macaron.sdk import AsyncMacaronClient
from macaron.store import Store, open_store

log = logging.getLogger(__name__)
GATEWAY_KEY_PREFIX = "macaron:gateway:"
"""Prefix of the gateway's keys in the shared store (per-key rate-limit counters)."""


class Gateway:
    """Everything a request needs: settings, auth guard, SDK client, metrics, chat service."""

    def __init__(self, settings: GatewaySettings, guard: Guard, client: AsyncMacaronClient, store: Store) -> None:
        self.settings = settings
        self.guard = guard
        self.client = client
        self.store = store
        self.metrics = GatewayMetrics()
        self.chat = ChatService(client, self.metrics)
        self.completions = CompletionService(client, self.metrics)
        self.created = p.now()
        self.draining = False
        """Set on SIGTERM: new chat requests get 503 and /readyz fails while streams finish."""


def router_client(settings: GatewaySettings) -> AsyncMacaronClient:
    """The SDK client the gateway talks to the router with (the caller's key is set per request)."""
    root = None
    if settings.router_ca_file:
        with open(settings.router_ca_file, "rb") as f:
            root = f.read()
    return AsyncMacaronClient(
        settings.router_target,
        api_key="",
        timeout=settings.router_timeout_s,
        max_retries=settings.router_max_retries,
        retry_rate_limits=False,  # a 429 goes back to the caller at once, with its Retry-After
        tls=settings.router_tls,
        root_certificates=root,
        channel_options=[("grpc.ssl_target_name_override", settings.router_server_name)]
        if settings.router_tls and settings.router_server_name else None,
    )


def create_app(
    settings: MacaronSettings,
    *,
    client: AsyncMacaronClient | None = None,
    store: Store | None = None,
    gateway_settings: GatewaySettings | None = None,
) -> FastAPI:
    """The gateway app; raises InsecureBindError for a non-loopback bind without API keys."""
    gs = gateway_settings or settings.gateway
    dev_mode = resolve_dev_mode(settings.auth, gs.host)
    # Its own key prefix: the router counts the same key's requests in the same Redis, and one request
    # must count once at each hop, not twice against one counter.
    store = store if store is not None else open_store(settings.redis_url, settings.store_timeout_s, GATEWAY_KEY_PREFIX)
    client = client if client is not None else router_client(gs)
    gateway = Gateway(gs, Guard(settings.auth, store, dev_mode=dev_mode), client, store)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if dev_mode:
            log.warning("gateway in DEV MODE: no API keys configured, serving without auth on %s (loopback only)", gs.host)
        log.info("gateway ready: router %s", gs.router_target)
        try:
            yield
        finally:
            gateway.draining = True
            await client.close()
            await store.close()

    app = FastAPI(
        title="Macaron Serve gateway",
        version=_version(),
        description="OpenAI-compatible chat completions over Macaron's Mixture-of-LoRA router. "
        "Use model `macaron-auto` to let the router choose, or `macaron-chat|agent|code|ui` to force one. "
        "The route shows in the `x-macaron-specialist` and `x-macaron-route-reason` response headers.",
        lifespan=lifespan,
    )
    app.state.gateway = gateway
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    app.include_router(router)
    if gs.playground:
        from macaron.gateway.playground import mount_playground

        mount_playground(app)
    # Added first, so it runs inside the request-context middleware: refusals carry x-request-id too.
    app.add_middleware(AdmissionMiddleware, settings=gs.admission, metrics=gateway.metrics)
    app.add_middleware(RequestContextMiddleware, max_body_bytes=gs.max_body_bytes)

    @app.exception_handler(GatewayError)
    async def _gateway_error(_: Request, exc: GatewayError) -> Response:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> Response:
        return from_validation(list(exc.errors())).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        kind = {404: "not_found_error"}.get(exc.status_code, "invalid_request_error")
        message = f"Unknown path {request.url.path}" if exc.status_code == 404 else str(exc.detail)
        code = {404: "unknown_url", 405: "method_not_allowed", 413: "request_too_large"}.get(exc.status_code)
        return GatewayError(exc.status_code, message, type=kind, code=code).response()

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> Response:
        log.exception("unexpected error")
        return GatewayError(500, "internal error; the request id is in x-request-id", type="server_error").response()

    return app


class BodyTooLarge(StarletteHTTPException):
    """Raised while reading a body over the limit (FastAPI lets HTTPExceptions through)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is over the limit of {limit} bytes")


class RequestContextMiddleware:
    """Pure ASGI (streams and disconnects pass untouched): request id, trace context, body size limit.

    The caller's `x-request-id` (or a new one) is bound for logs, sent to the router by the SDK,
    and returned on every response, errors included.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope[RECEIVED_AT_KEY] = time.monotonic()  # deadlines count from here
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        request_id = telemetry.bind_request_id(headers.get(telemetry.REQUEST_ID_KEY))
        token = otel_context.attach(telemetry.extract(headers))
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
            await send(message)

        try:
            length = headers.get("content-length")
            if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
                await self._too_large(send_with_id)
                return
            received = 0

            async def limited_receive() -> Message:
                nonlocal received
                message = await receive()
                if message["type"] == "http.request":
                    received += len(message.get("body", b""))
                    if received > self.max_body_bytes:
                        raise BodyTooLarge(self.max_body_bytes)
                return message

            try:
                await self.app(scope, limited_receive, send_with_id)
            except BodyTooLarge:
                if not started:
                    await self._too_large(send_with_id)
            except Exception:
                # Answered here, inside the request-id wrapper: Starlette's own 500 goes out without it.
                log.exception("unexpected error")
                if not started:
                    error = GatewayError(500, "internal error; the request id is in x-request-id", type="server_error")
                    await JSONResponse(error.body(), status_code=500)({"type": "http"}, _no_receive, send_with_id)
        finally:
            otel_context.detach(token)

    async def _too_large(self, send: Send) -> None:
        error = GatewayError(
            413, f"the request body is over the limit of {self.max_body_bytes} bytes", code="request_too_large"
        )
        await JSONResponse(error.body(), status_code=413)({"type": "http"}, _no_receive, send)


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}


def _openapi(app: FastAPI) -> dict:
    """FastAPI's document plus the request bodies' schemas (the routes parse their bodies themselves)."""
    if app.openapi_schema is None:
        from fastapi.openapi.utils import get_openapi

        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for name, model in (("ChatCompletionRequest", p.ChatCompletionRequest), ("CompletionRequest", pc.CompletionRequest)):
            request_schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
            components.update(request_schema.pop("$defs", {}))
            components[name] = request_schema
        app.openapi_schema = schema
    return app.openapi_schema


def _version() -> str:
    try:
        return metadata.version("macaron-serve")
    except metadata.PackageNotFoundError:
        return "0.0.0"


__all__ = ["Gateway", "RequestContextMiddleware", "create_app", "router_client"]


