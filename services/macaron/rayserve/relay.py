"""gRPC between Serve deployments: the same protobuf bytes, carried by a Serve handle.

Why not plain gRPC between replicas: Serve chooses the replica, counts each one's ongoing
requests for autoscaling and drains a replica before it goes away only for calls that travel
through its handles. So the caller keeps its generated stub but gives it a `ServeChannel`,
and the callee keeps its real grpc.aio server (interceptors, deadlines, health) on loopback
inside the replica, behind a `GrpcRelay` that replays each call on it byte for byte. The
contract is the proto: what crosses the handle is the serialized request, the metadata, the
remaining deadline, and back the serialized messages and the final status with its trailing
metadata (RetryInfo included), rebuilt into `grpc.aio.AioRpcError` on the caller's side.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator, Callable, Sequence

import grpc

Metadata = Sequence[tuple[str, str | bytes]]
MESSAGE, STATUS = "m", "s"
"""Kinds of the items a relayed stream yields: a serialized message, or the final non-OK status."""


def _status_item(exc: grpc.aio.AioRpcError) -> tuple[Any, ...]:
    trailing = tuple((k, v) for k, v in (exc.trailing_metadata() or ()))
    return (STATUS, exc.code().value[0], exc.details() or "", trailing)


def _code(value: int) -> grpc.StatusCode:
    return next((c for c in grpc.StatusCode if c.value[0] == value), grpc.StatusCode.UNKNOWN)


def rpc_error(code: grpc.StatusCode, details: str, trailing: Metadata = ()) -> grpc.aio.AioRpcError:
    """An AioRpcError as a real channel raises it (code, details, trailing metadata)."""
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(*trailing), details=details)


class GrpcRelay:
    """Replica side: replays relayed calls on this replica's own gRPC server (loopback)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self._channel = grpc.aio.insecure_channel(target, options=[("grpc.enable_retries", 0)])

    async def unary(self, method: str, request: bytes, metadata: Metadata, timeout_s: float | None) -> tuple[Any, ...]:
        """One unary call; returns (MESSAGE, bytes) or the final status item."""
        call = self._channel.unary_unary(method)  # no serializers: bytes in, bytes out
        try:
            return (MESSAGE, await call(request, metadata=tuple(metadata), timeout=timeout_s))
        except grpc.aio.AioRpcError as exc:
            return _status_item(exc)

    async def stream(self, method: str, request: bytes, metadata: Metadata,
                     timeout_s: float | None) -> AsyncIterator[tuple[Any, ...]]:
        """One server-streaming call; yields (MESSAGE, bytes) items, then a status item if not OK.

        Cancelling this generator (the caller cancelled, or went away) cancels the call on the server.
        """
        call = self._channel.unary_stream(method)(request, metadata=tuple(metadata), timeout=timeout_s)
        try:
            while True:
                message = await call.read()
                if message is grpc.aio.EOF:
                    return
                yield (MESSAGE, message)
        except grpc.aio.AioRpcError as exc:
            yield _status_item(exc)
        finally:
            if not call.done():
                call.cancel()

    async def close(self) -> None:
        await self._channel.close()


def _serve_error(exc: BaseException) -> grpc.aio.AioRpcError:
    """A Serve/Ray failure as the gRPC status a real channel would have given."""
    from ray import exceptions as ray_exceptions
    from ray.serve import exceptions as serve_exceptions

    if isinstance(exc, serve_exceptions.BackPressureError):
        return rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, f"the deployment's queue is full: {exc}")
    if isinstance(exc, (serve_exceptions.DeploymentUnavailableError, ray_exceptions.RayActorError,
                        ray_exceptions.ActorUnavailableError)):
        return rpc_error(grpc.StatusCode.UNAVAILABLE, f"the replica is gone: {type(exc).__name__}")
    return rpc_error(grpc.StatusCode.UNAVAILABLE, f"the relay failed: {type(exc).__name__}: {exc}")


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()


class _StreamCall:
    """What `stub.Method(request)` returns for a server-streaming method: read(), cancel(), done(), async iteration."""

    def __init__(self, response: Any, deserialize: Callable[[bytes], Any] | None, deadline: float | None) -> None:
        self._response = response
        self._deserialize = deserialize
        self._deadline = deadline
        self._done = False

    async def read(self) -> Any:
        if self._done:
            return grpc.aio.EOF
        try:
            remaining = _remaining(self._deadline)
            if remaining is not None and remaining <= 0:
                raise asyncio.TimeoutError
            item = await asyncio.wait_for(self._response.__anext__(), remaining)
        except StopAsyncIteration:
            self._done = True
            return grpc.aio.EOF
        except (asyncio.TimeoutError, TimeoutError):
            self.cancel()
            raise rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None
        except asyncio.CancelledError:
            self.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - every transport failure becomes a gRPC status
            self._finish()
            raise _serve_error(exc) from None
        if item[0] == STATUS:
            self._finish()
            raise rpc_error(_code(item[1]), item[2], item[3])
        return self._deserialize(item[1]) if self._deserialize else item[1]

    def _finish(self) -> None:
        self._done = True

    def cancel(self) -> bool:
        if self._done:
            return False
        self._done = True
        self._response.cancel()
        return True

    def done(self) -> bool:
        return self._done

    def __aiter__(self) -> _StreamCall:
        return self

    async def __anext__(self) -> Any:
        message = await self.read()
        if message is grpc.aio.EOF:
            raise StopAsyncIteration
        return message


class _Multicallable:
    def __init__(self, handle: Any, method: str, serialize: Callable[[Any], bytes] | None,
                 deserialize: Callable[[bytes], Any] | None, streaming: bool) -> None:
        self._handle, self._method, self._serialize, self._deserialize = handle, method, serialize, deserialize
        self._streaming = streaming

    def __call__(self, request: Any, *, timeout: float | None = None, metadata: Metadata | None = None,
                 **_: Any) -> Any:
        payload = self._serialize(request) if self._serialize else request
        deadline = None if timeout is None else time.monotonic() + timeout
        metadata = tuple(metadata or ())
        if self._streaming:
            response = self._handle.options(stream=True).relay_stream.remote(self._method, payload, metadata, timeout)
            return _StreamCall(response, self._deserialize, deadline)
        return self._unary(payload, metadata, timeout, deadline)

    async def _unary(self, payload: bytes, metadata: Metadata, timeout: float | None, deadline: float | None) -> Any:
        response = self._handle.relay_unary.remote(self._method, payload, metadata, timeout)
        try:
            item = await asyncio.wait_for(response, _remaining(deadline))
        except (asyncio.TimeoutError, TimeoutError):
            response.cancel()
            raise rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None
        except asyncio.CancelledError:
            response.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - every transport failure becomes a gRPC status
            raise _serve_error(exc) from None
        if item[0] == STATUS:
            raise rpc_error(_code(item[1]), item[2], item[3])
        return self._deserialize(item[1]) if self._deserialize else item[1]


class ServeChannel:
    """The part of `grpc.aio.Channel` generated stubs use, over a Serve deployment handle.

    The deployment must expose `relay_unary` and `relay_stream` (a `GrpcRelay`'s two methods).
    """

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def unary_unary(self, method: str, request_serializer: Any = None, response_deserializer: Any = None,
                    **_: Any) -> _Multicallable:
        return _Multicallable(self.handle, method, request_serializer, response_deserializer, streaming=False)

    def unary_stream(self, method: str, request_serializer: Any = None, response_deserializer: Any = None,
                     **_: Any) -> _Multicallable:
        return _Multicallable(self.handle, method, request_serializer, response_deserializer, streaming=True)

    async def close(self, grace: float | None = None) -> None:
        return None  # the handle belongs to Serve
