"""Bytes that are not a valid request message get INVALID_ARGUMENT, not UNKNOWN.

grpc.aio decodes a request with the generated `FromString` before any servicer code runs, and a
`DecodeError` there (corrupt wire format, invalid UTF-8 in a string field) reaches the caller as
UNKNOWN "Unexpected DecodeError", which reads like a server bug and is counted as one. This
interceptor gives each method a deserializer that turns a decode failure into a `Malformed`
marker, and a behaviour that answers the marker with INVALID_ARGUMENT naming the message type;
well-formed requests pass through untouched. Every Macaron gRPC server installs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import grpc
from google.protobuf.message import DecodeError


@dataclass(frozen=True)
class Malformed:
    """A request body the method's message type could not decode."""

    error: str


def _tolerant(deserialize: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def decode(data: bytes) -> Any:
        try:
            return deserialize(data)
        except (DecodeError, UnicodeDecodeError, ValueError) as exc:
            return Malformed(str(exc) or type(exc).__name__)

    return decode


def _message(method: str, marker: Malformed) -> str:
    return f"the request of {method} is not a valid message: {marker.error}"


def _unary(behavior: Callable[..., Awaitable[Any]], method: str) -> Callable[..., Awaitable[Any]]:
    async def guarded(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, _message(method, request))
        return await behavior(request, context)

    return guarded


def _stream(behavior: Callable[..., Any], method: str) -> Callable[..., Any]:
    async def guarded(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, _message(method, request))
        result = behavior(request, context)
        if hasattr(result, "__aiter__"):
            async for item in result:
                yield item
        else:  # a coroutine that writes with context.write
            await result

    return guarded


class MalformedRequestInterceptor(grpc.aio.ServerInterceptor):
    """Answers undecodable request bytes with INVALID_ARGUMENT (unary-request methods)."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None or handler.request_streaming:
            return handler
        method = handler_call_details.method
        deserializer = _tolerant(handler.request_deserializer)
        if handler.unary_unary is not None:
            return handler._replace(request_deserializer=deserializer, unary_unary=_unary(handler.unary_unary, method))
        if handler.unary_stream is not None:
            return handler._replace(request_deserializer=deserializer, unary_stream=_stream(handler.unary_stream, method))
        return handler
