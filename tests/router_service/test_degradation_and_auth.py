"""Redis stopped mid-test (a redis-server of this test's own), and API keys with shared per-key limits."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Iterator

import grpc
import pytest
import redis
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status
from google.rpc import error_details_pb2

from macaron.auth import ApiKeyEntry, AuthSettings, hash_api_key
from macaron.router.server import STORE_HEALTH_NAME
from macaron.v1 import common_pb2 as pb
from macaron.v1 import router_pb2
from specialist.processes import free_port

from .test_router_e2e import generate, reason, req

pytestmark = pytest.mark.slow


class OwnRedis:
    """A redis-server on a free loopback port, without persistence, that the test may stop and restart."""

    def __init__(self) -> None:
        if shutil.which("redis-server") is None:
            pytest.skip("redis-server is not on PATH")
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if redis.Redis(port=self.port, socket_timeout=0.5).ping():
                    return
            except redis.RedisError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server on {self.port} did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None


@pytest.fixture
def own_redis() -> Iterator[OwnRedis]:
    server = OwnRedis()
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def store_health(port: int) -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        answer = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=STORE_HEALTH_NAME), timeout=5)
        return answer.status


async def wait_for(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():
            return
        await asyncio.sleep(0.1)
    raise AssertionError("condition not reached in time")


async def test_redis_stopped_mid_test_then_restarted(routers, own_redis: OwnRedis) -> None:
    server, stub = await routers.start(redis_url=own_redis.url)
    turn1 = await generate(stub, req("write a python function", session="s-redis"))
    await server.core.flush()
    turn2 = await generate(stub, req("write a python function", "thanks", session="s-redis"))
    assert reason(turn2) == "ROUTE_REASON_SESSION"

    own_redis.stop()
    # every request still succeeds, decided by the classifier alone, and quickly; 8: more than the key's rate
    # credit left (auth.rate_credit 8, two used), so the last ones ask the store for their limit and fall back
    for i in range(8):
        started = time.monotonic()
        during = await generate(stub, req("write a python function", "thanks", session="s-redis"), timeout=30)
        assert during[-1].finish.reason != pb.FINISH_REASON_UNSPECIFIED
        assert reason(during) == "ROUTE_REASON_CLASSIFIER" and during[0].route.specialist == pb.SPECIALIST_KIND_CHAT
        assert time.monotonic() - started < 10
    assert server.core.degraded
    assert server.metrics.degraded._value.get() == 1 and server.metrics.store_errors._value.get() >= 1
    assert await store_health(server.port) == health_pb2.HealthCheckResponse.NOT_SERVING
    assert server.guard.degraded  # limits fall back to this process
    assert server.metrics.registry.get_sample_value("macaron_router_admissions_total", {"source": "process"}) >= 1
    classify = await stub.Classify(router_pb2.ClassifyRequest(request=req("write a python function")), timeout=10)
    assert classify.route.reason == pb.ROUTE_REASON_CLASSIFIER

    own_redis.start()  # empty: no persistence
    await wait_for(lambda: _serving(server.port))
    assert not server.core.degraded and server.metrics.degraded._value.get() == 0
    # state is shared again: a new session sticks, affinity is recorded
    again = await generate(stub, req("write a python function", session="s-after"))
    await server.core.flush()
    sticky = await generate(stub, req("write a python function", "thanks", session="s-after"))
    assert reason(sticky) == "ROUTE_REASON_SESSION" and sticky[0].route.replica == again[0].route.replica
    keys = redis.Redis.from_url(own_redis.url).keys(f"{routers.key_prefix}*")
    assert any(b"session:" in k for k in keys) and any(b"load" in k for k in keys)
    assert turn1[0].route.specialist == pb.SPECIALIST_KIND_CODE


async def _serving(port: int) -> bool:
    return await store_health(port) == health_pb2.HealthCheckResponse.SERVING


async def test_router_started_without_redis_serves_and_recovers(routers, own_redis: OwnRedis) -> None:
    own_redis.stop()
    server, stub = await routers.start(redis_url=own_redis.url)
    assert server.core.degraded
    chunks = await generate(stub, req("write a python function", session="s-cold"), timeout=30)
    assert chunks[0].route.specialist == pb.SPECIALIST_KIND_CODE
    own_redis.start()
    await wait_for(lambda: _serving(server.port))


async def test_api_keys_and_shared_limits(routers, settings) -> None:
    key, other = "mk-test-key", "mk-limited-key"
    auth = AuthSettings(api_keys=[
        ApiKeyEntry(name="team-a", sha256=hash_api_key(key)),
        ApiKeyEntry(name="team-b", sha256=hash_api_key(other), requests_per_minute=3),
    ])
    keyed = settings.model_copy(update={"auth": auth})
    _, a = await routers.start(settings=keyed)
    _, b = await routers.start(settings=keyed)
    classify = router_pb2.ClassifyRequest(request=req("write a python function"))
    for metadata in ((), (("authorization", "Bearer mk-wrong"),), (("x-api-key", ""),)):
        err = await _error(a.Classify(classify, timeout=10, metadata=metadata))
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED
    err = await _error(generate(a, req("hello")))
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED
    ok = await generate(a, req("hello"), metadata=(("authorization", f"Bearer {key}"),))
    assert ok[0].route.specialist == pb.SPECIALIST_KIND_CHAT
    assert (await a.Classify(classify, timeout=10, metadata=(("x-api-key", key),))).route.specialist == pb.SPECIALIST_KIND_CODE
    # team-b may make 3 requests a minute over all router replicas together
    limited = (("authorization", f"Bearer {other}"),)
    await a.Classify(classify, timeout=10, metadata=limited)
    await b.Classify(classify, timeout=10, metadata=limited)
    await generate(a, req("hello"), metadata=limited)
    err = await _error(b.Classify(classify, timeout=10, metadata=limited))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    status = rpc_status.from_call(err)
    retry = error_details_pb2.RetryInfo()
    assert status is not None and status.details[0].Unpack(retry) and retry.retry_delay.ToMilliseconds() > 0
    err = await _error(generate(b, req("hello"), metadata=limited))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


async def _error(awaitable) -> grpc.aio.AioRpcError:
    try:
        await awaitable
    except grpc.aio.AioRpcError as exc:
        return exc
    raise AssertionError("the call succeeded; an error was expected")
