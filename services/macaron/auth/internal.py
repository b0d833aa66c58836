"""The internal token: what one Macaron service shows the next (router → specialist).

API keys stop at the router; behind it, a specialist serves whoever reaches its port. A shared
secret (`auth.internal_token`, from a Kubernetes Secret) closes that door: the router sends it
as `authorization: Bearer <token>` metadata, and a specialist's server interceptor refuses any
call without it (UNAUTHENTICATED) except the standard health and reflection services, which
the kubelet and operators call without credentials.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from macaron.auth.guard import InsecureBindError, is_loopback

OPEN_SERVICES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
"""Methods served without the token: probes and tooling."""


def bearer(metadata: Any) -> str | None:
    """The token from `authorization: Bearer <token>` in gRPC metadata (None when absent)."""
    for key, value in metadata or ():
        if key.lower() == "authorization" and isinstance(value, str) and value[:7].lower() == "bearer ":
            return value[7:].strip() or None
    return None


def token_matches(expected: str, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(expected.encode(), given.encode())


def require_internal_token(token: str | None, bind_host: str, what: str) -> str | None:
    """The token to enforce; raises InsecureBindError when a non-loopback bind has none."""
    if not token and not is_loopback(bind_host):
        raise InsecureBindError(
            f"refusing to serve the {what} on {bind_host} without auth.internal_token: set it (the same secret on "
            "every service, e.g. MACARON_AUTH__INTERNAL_TOKEN from a Secret) or bind to 127.0.0.1"
        )
    return token or None


class InternalTokenInterceptor(grpc.aio.ServerInterceptor):
    """Refuses calls without the internal token (health and reflection excepted)."""

    def __init__(self, token: str) -> None:
        self._token = token

        async def refuse(_: Any, context: grpc.aio.ServicerContext) -> None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED,
                                "missing or wrong internal token: only Macaron's router may call this service")

        self._refuse_unary = grpc.unary_unary_rpc_method_handler(refuse)
        self._refuse_stream = grpc.unary_stream_rpc_method_handler(refuse)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method = details.method or ""
        if method.startswith(OPEN_SERVICES) or token_matches(self._token, bearer(details.invocation_metadata)):
            return await continuation(details)
        handler = await continuation(details)
        if handler is not None and handler.response_streaming:
            return self._refuse_stream
        return self._refuse_unary
