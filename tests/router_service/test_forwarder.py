"""Forwarding over fake specialist replicas: retry only before the first chunk, deadlines and cancellation propagate."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from macaron.router.forwarder import Forwarder
from macaron.v1 import common_pb2 as pb
from macaron.v1 import specialist_pb2_grpc


class FakeSpecialist(specialist_pb2_grpc.SpecialistServicer):
    """Fails before its first chunk, fails after it, or streams slowly, as told."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.calls = 0
        self.deadlines: list[float | None] = []
        self.metadata: list[dict[str, str]] = []
        self.cancelled = asyncio.Event()

    async def Generate(self, request, context):  # noqa: N802
        self.calls += 1
        self.deadlines.append(context.time_remaining())
        self.metadata.append({k: v for k, v in context.invocation_metadata() if isinstance(v, str)})
        if self.mode == "unavailable":
            await context.abort(grpc.StatusCode.UNAVAILABLE, "draining")
        if self.mode == "invalid":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad")
        yield pb.GenerateChunk(request_id=request.request_id, route=pb.RouteDecision(replica=self.mode))
        if self.mode == "broken":
            await context.abort(grpc.StatusCode.INTERNAL, "died mid-stream")
        try:
            for i in range(3 if self.mode == "ok" else 1000):
                await asyncio.sleep(0.01 if self.mode == "ok" else 0.05)
                yield pb.GenerateChunk(text=str(i))
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


async def serve(servicer: FakeSpecialist) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    specialist_pb2_grpc.add_SpecialistServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


@pytest.fixture
async def replicas():
    started: list[grpc.aio.Server] = []

    async def make(*modes: str) -> tuple[list[FakeSpecialist], list[str]]:
        fakes, targets = [], []
        for mode in modes:
            fake = FakeSpecialist(mode)
            server, target = await serve(fake)
            started.append(server)
            fakes.append(fake)
            targets.append(target)
        return fakes, targets

    yield make
    for server in started:
        await server.stop(0)


async def collect(forwarder: Forwarder, timeout: float = 10.0) -> list[pb.GenerateChunk]:
    return [c async for c in forwarder.stream("chat", pb.GenerateRequest(request_id="r1"), timeout_s=timeout,
                                              metadata=[("x-request-id", "r1")])]


async def test_retries_on_another_replica_before_the_first_chunk(replicas) -> None:
    (down, ok), targets = await replicas("unavailable", "ok")
    retried = []
    forwarder = Forwarder({"chat": targets}, max_attempts=3, on_retry=lambda name, code: retried.append(code))
    try:
        for _ in range(2):  # whichever replica comes first
            chunks = await collect(forwarder)
            assert chunks[0].route.replica == "ok" and [c.text for c in chunks[1:]] == ["0", "1", "2"]
        assert ok.calls == 2 and down.calls >= 1 and retried == [grpc.StatusCode.UNAVAILABLE] * down.calls
        assert ok.metadata[0]["x-request-id"] == "r1"
        assert 0 < ok.deadlines[0] <= 10.0  # the caller's deadline travels
    finally:
        await forwarder.close()


async def test_no_retry_for_bad_requests_or_after_the_first_chunk(replicas) -> None:
    (invalid, broken, ok), targets = await replicas("invalid", "broken", "ok")
    for fake, target in ((invalid, targets[0]), (broken, targets[1])):
        forwarder = Forwarder({"chat": [target, targets[2]]}, max_attempts=3)
        try:
            got: list[pb.GenerateChunk] = []
            with pytest.raises(grpc.aio.AioRpcError) as err:
                for _ in range(4):  # round the targets until the failing one is picked
                    got = []
                    async for chunk in forwarder.stream("chat", pb.GenerateRequest(), timeout_s=10):
                        got.append(chunk)
            expected = grpc.StatusCode.INVALID_ARGUMENT if fake is invalid else grpc.StatusCode.INTERNAL
            assert err.value.code() == expected
            if fake is broken:
                assert got and got[0].route.replica == "broken"  # the chunk went out: the error is the caller's
        finally:
            await forwarder.close()
    assert invalid.calls == 1 and broken.calls == 1


async def test_closing_the_stream_cancels_the_specialist_call(replicas) -> None:
    (slow,), targets = await replicas("slow")
    forwarder = Forwarder({"chat": targets})
    try:
        stream = forwarder.stream("chat", pb.GenerateRequest(), timeout_s=30)
        first = await stream.__anext__()
        assert first.route.replica == "slow"
        await stream.__anext__()
        await stream.aclose()  # the caller went away
        await asyncio.wait_for(slow.cancelled.wait(), 10)
    finally:
        await forwarder.close()


async def test_an_exhausted_deadline_is_deadline_exceeded(replicas) -> None:
    (slow,), targets = await replicas("slow")
    forwarder = Forwarder({"chat": targets})
    try:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await collect(forwarder, timeout=0.3)
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    finally:
        await forwarder.close()
