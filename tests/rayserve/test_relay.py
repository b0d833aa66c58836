"""The relay keeps gRPC's contract: a stub over a `ServeChannel` sees what a real channel shows
(messages, the final status with its details and trailing metadata, RetryInfo included, deadlines,
cancellation reaching the server).

The server is a real grpc.aio server on loopback behind a real `GrpcRelay`; only the Serve handle
between them is replaced by an in-process one with the same call shape (`.remote()`, `.options(stream=True)`,
`.cancel()`), so these cases run in a second. test_ray_serve.py covers the same path through Ray.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

import grpc
import pytest
from google.protobuf import duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_status import rpc_status

from macaron.grpc_malformed import MalformedRequestInterceptor
from macaron.rayserve.relay import GrpcRelay, ServeChannel
from macaron.v1 import common_pb2, specialist_pb2_grpc


class _Specialist(specialist_pb2_grpc.SpecialistServicer):
    """Streams the request's last message word by word; 'busy' answers RESOURCE_EXHAUSTED with RetryInfo;
    'slow' streams one word a second (for deadlines and cancellation)."""

    def __init__(self) -> None:
        self.cancelled = asyncio.Event()

    async def Generate(self, request: common_pb2.GenerateRequest, context: Any) -> AsyncIterator[common_pb2.GenerateChunk]:  # noqa: N802
        text = request.messages[-1].content
        if text == "busy":
            retry = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=2))
            detail = status_pb2.Status().details.add()
            detail.Pack(retry)
            status = status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED, message="pool full", details=[detail])
            await context.abort_with_status(rpc_status.to_status(status))
        try:
            for word in text.split():
                if text.startswith("slow"):
                    await asyncio.sleep(1.0)
                yield common_pb2.GenerateChunk(text=word)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


class _Response:
    """What a Serve handle call returns: awaitable (unary) or async-iterable (stream), and cancel()."""

    def __init__(self, result: Any) -> None:
        self._result = result
        self._task: asyncio.Task[Any] | None = None

    def __await__(self) -> Any:
        self._task = asyncio.ensure_future(self._result)
        return self._task.__await__()

    def __aiter__(self) -> _Response:
        return self

    async def __anext__(self) -> Any:
        return await self._result.__anext__()

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
        elif hasattr(self._result, "aclose"):
            asyncio.ensure_future(self._result.aclose())


class _Method:
    def __init__(self, fn: Any) -> None:
        self._fn = fn

    def remote(self, *args: Any) -> _Response:
        return _Response(self._fn(*args))


class _Handle:
    """An in-process stand-in for a DeploymentHandle of a deployment exposing relay_unary / relay_stream."""

    def __init__(self, relay: GrpcRelay) -> None:
        self.relay_unary = _Method(relay.unary)
        self.relay_stream = _Method(relay.stream)

    def options(self, **_: Any) -> _Handle:
        return self


@pytest.fixture
async def relayed():
    server = grpc.aio.server(interceptors=[MalformedRequestInterceptor()])
    servicer = _Specialist()
    specialist_pb2_grpc.add_SpecialistServicer_to_server(servicer, server)
    health = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    await health.set("macaron.v1.Specialist", health_pb2.HealthCheckResponse.SERVING)
    relay = GrpcRelay(f"127.0.0.1:{port}")
    channel = ServeChannel(_Handle(relay))
    try:
        yield specialist_pb2_grpc.SpecialistStub(channel), health_pb2_grpc.HealthStub(channel), servicer
    finally:
        await relay.close()
        await server.stop(0)


def _request(text: str) -> common_pb2.GenerateRequest:
    return common_pb2.GenerateRequest(messages=[common_pb2.ChatMessage(role=common_pb2.ROLE_USER, content=text)])


async def test_messages_and_unary_calls_pass_through(relayed) -> None:
    stub, health, _ = relayed
    words = [chunk.text async for chunk in stub.Generate(_request("one two three"), timeout=5)]
    assert words == ["one", "two", "three"]
    reply = await health.Check(health_pb2.HealthCheckRequest(service="macaron.v1.Specialist"), timeout=5)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await health.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=5)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


async def test_status_details_and_retry_info_survive(relayed) -> None:
    stub, _, _ = relayed
    call = stub.Generate(_request("busy"), timeout=5)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call.read()
    exc = caught.value
    assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and exc.details() == "pool full"
    status = rpc_status.from_call(exc)
    retry = error_details_pb2.RetryInfo()
    assert status is not None and status.details[0].Unpack(retry) and retry.retry_delay.seconds == 2


async def test_deadline_is_deadline_exceeded_and_cancel_reaches_the_server(relayed) -> None:
    stub, _, servicer = relayed
    call = stub.Generate(_request("slow a b c d"), timeout=0.5)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in call:
            pass
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    await asyncio.wait_for(servicer.cancelled.wait(), 3.0)


async def test_undecodable_bytes_are_invalid_argument(relayed) -> None:
    stub, _, _ = relayed
    relay_channel: ServeChannel = stub.Generate._handle and ServeChannel(stub.Generate._handle)
    call = relay_channel.unary_stream("/macaron.v1.Specialist/Generate")(b"\xff\xff\xff", timeout=5)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call.read()
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
