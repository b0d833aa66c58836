"""Per-key limits beyond requests per minute: requests in flight and tokens per minute, shared by
every replica through Redis, and checked by the router before any routing work."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any, AsyncIterator, Awaitable, Callable

import grpc
import pytest

from macaron.auth import ApiKeyEntry, AuthSettings, Guard, RateLimitedError, hash_api_key
from macaron.store import MemoryStore, RedisStore


def _settings(key: str, **limits: Any) -> AuthSettings:
    return AuthSettings(api_keys=[ApiKeyEntry(name=f"team-{uuid.uuid4().hex[:6]}", sha256=hash_api_key(key), **limits)])


@pytest.fixture
async def redis_store(redis_url: str):
    store = RedisStore(redis_url, timeout_s=2.0, key_prefix=f"test-limits-{uuid.uuid4().hex[:8]}:")
    yield store
    await store.close()


async def test_requests_in_flight_are_limited_over_all_replicas(redis_store) -> None:
    settings = _settings("mk-k", max_concurrent_requests=2)
    a, b = (Guard(settings, redis_store, dev_mode=False) for _ in range(2))  # two routers, one Redis
    principal = a.authenticate("mk-k")
    first = await a.acquire(principal)
    second = await b.acquire(principal)
    with pytest.raises(RateLimitedError, match="in flight") as info:
        await a.acquire(principal)
    assert info.value.retry_after_s > 0
    await second.release()
    third = await a.acquire(principal)  # a slot came back
    await first.release()
    await first.release()  # twice is once
    await third.release()
    leases = [await b.acquire(principal) for _ in range(2)]
    for lease in leases:
        await lease.release()


async def test_tokens_per_minute_are_charged_when_requests_end(redis_store) -> None:
    settings = _settings("mk-t", tokens_per_minute=100)
    a, b = (Guard(settings, redis_store, dev_mode=False) for _ in range(2))
    principal = a.authenticate("mk-t")
    lease = await a.acquire(principal)
    await lease.release(tokens=60)
    lease = await b.acquire(principal)  # 60 of 100 spent: still admitted
    await lease.release(tokens=60)
    with pytest.raises(RateLimitedError, match="token budget") as info:
        await a.acquire(principal)  # 120 spent, on the other replica
    assert 0 < info.value.retry_after_s <= 60


async def test_an_over_limit_request_takes_no_slot(redis_store) -> None:
    """Rate, budget and slot are one store call: a request refused by its rate limit holds no slot (the slots
    of the requests in flight are all there is), and one refused for want of a slot uses no request."""
    settings = _settings("mk-r", requests_per_minute=2, max_concurrent_requests=1)
    a, b = (Guard(settings, redis_store, dev_mode=False) for _ in range(2))
    principal = a.authenticate("mk-r")
    inflight = f"inflight:{principal.name}"
    lease = await a.lease(principal)
    with pytest.raises(RateLimitedError, match="in flight"):
        await b.lease(principal)  # no slot: refused, and this request is not counted against the rate
    assert sum(int(v) for v in (await redis_store.hgetall_many([inflight]))[0].values()) == 1
    await lease.release()
    lease = await b.lease(principal)  # the second request of the minute: the refused one did not count
    await lease.release()
    with pytest.raises(RateLimitedError, match="rate limit") as info:
        await a.lease(principal)
    assert 0 < info.value.retry_after_s <= 60
    assert sum(int(v) for v in (await redis_store.hgetall_many([inflight]))[0].values()) == 0


async def test_keys_without_these_limits_hold_no_lease() -> None:
    guard = Guard(_settings("mk-free"), MemoryStore(), dev_mode=False)
    principal = guard.authenticate("mk-free")
    for _ in range(50):
        await guard.acquire(principal)  # nothing to count, nothing to release


async def test_defaults_apply_to_keys_that_set_none() -> None:
    settings = _settings("mk-d").model_copy(update={"default_max_concurrent_requests": 1})
    guard = Guard(settings, MemoryStore(), dev_mode=False)
    principal = guard.authenticate("mk-d")
    assert principal.max_concurrent_requests == 1
    lease = await guard.acquire(principal)
    with pytest.raises(RateLimitedError):
        await guard.acquire(principal)
    await lease.release()


class CountingClassifier:
    """Unsure about everything (so a routed request would also ask the judge); counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def classify(self, text: str | None = None, *, messages: Any = None, tools: Any = None, **_: Any) -> dict[str, Any]:
        self.calls += 1
        probs = {"chat": 0.3, "agent": 0.25, "code": 0.25, "ui": 0.2}
        return {"specialist": "chat", "probabilities": probs, "confidence": 0.3}

@contextlib.asynccontextmanager
async def _router_with_limits(cache_dir: Any, key: str, auth: AuthSettings, store: Any,
                              classifier: Any) -> AsyncIterator[tuple[Any, Callable[[], Awaitable[Any]]]]:
    """A real router on loopback with these limits (no specialist answers behind it) and a call that sends one
    request with `key` and returns its AioRpcError, or None when it was not refused."""
    from transformers import AutoTokenizer

    from macaron.assets import ensure_tiny_model
    from macaron.config import MacaronSettings
    from macaron.discovery import StaticSource
    from macaron.router.server import RouterServer
    from macaron.v1 import common_pb2 as pb
    from macaron.v1 import router_pb2_grpc

    tiny = ensure_tiny_model(cache_dir=cache_dir, progress=False)
    settings = MacaronSettings(auth=auth.model_dump(), router={"metrics": False, "judge_timeout_s": 0.5})
    router = RouterServer(settings, store=store, classifier=classifier,
                          tokenizer=AutoTokenizer.from_pretrained(str(tiny.model_dir)),
                          discovery=StaticSource(["http://127.0.0.1:9"]), host="127.0.0.1", port=0, serve_metrics=False)
    await router.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{router.port}") as channel:
            stub = router_pb2_grpc.RouterStub(channel)
            request = pb.GenerateRequest(messages=[pb.ChatMessage(role=pb.ROLE_USER, content="hello")])
            metadata = (("authorization", f"Bearer {key}"),)

            async def generate() -> grpc.aio.AioRpcError | None:
                try:
                    async for _ in stub.Generate(request, timeout=10, metadata=metadata):
                        pass
                except grpc.aio.AioRpcError as exc:
                    return exc
                return None

            yield router, generate
    finally:
        await router.aclose()


async def test_the_router_checks_limits_before_routing(macaron_cache_dir) -> None:
    """An over-limit request is refused before the judge's engine call and the classifier's escalation (the
    router checks the limit beside its fast classifier, not before it)."""
    key = "mk-router-limit"
    auth = _settings(key, requests_per_minute=1, max_concurrent_requests=5)
    classifier = CountingClassifier()
    store = MemoryStore()
    async with _router_with_limits(macaron_cache_dir, key, auth, store, classifier) as (_, generate):
        first = await generate()
        assert first is None or first.code() != grpc.StatusCode.RESOURCE_EXHAUSTED  # routed (no specialist here)
        routed = classifier.calls
        assert routed >= 1
        refused = await generate()
        assert refused is not None and refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        # refused before the judge (an engine call) and before any escalation: the limit check runs
        # beside the decision, so the fast classifier may have run once, nothing more
        assert classifier.calls <= routed + 1
        # the routed request's slot comes back when it ends; the refused one never took one
        inflight = f"inflight:{auth.api_keys[0].name}"
        deadline = asyncio.get_running_loop().time() + 10
        while sum(int(v) for v in (await store.hgetall_many([inflight]))[0].values()) != 0:
            assert asyncio.get_running_loop().time() < deadline, "a slot was left taken"
            await asyncio.sleep(0.05)


async def _admit(guard: Guard, principal: Any) -> bool:
    """One request through a router's path: its rate credit first, else the store (which grants new credit)."""
    if guard.take_credit(principal):
        return True
    try:
        await guard.lease(principal)
    except RateLimitedError:
        return False
    return True


async def test_rate_credit_keeps_the_limit_over_two_replicas(redis_store) -> None:
    """A rate-only key takes its credit (8) at once and admits locally; two replicas alternating still admit
    exactly the limit in the window (credit near the limit is what is left, not 8), then both refuse. Near the
    limit one replica may still admit from its credit while the other is refused (the trade-off)."""
    settings = _settings("mk-credit", requests_per_minute=20).model_copy(update={"rate_credit": 8})
    a, b = (Guard(settings, redis_store, dev_mode=False) for _ in range(2))
    principal = a.authenticate("mk-credit")
    verdicts = [await _admit((a, b)[i % 2], principal) for i in range(40)]
    assert sum(verdicts) == 20 and verdicts[:16] == [True] * 16 and not any(verdicts[-10:])
    client = redis_store._redis  # the window is a sorted set: 20 members, one per admission
    assert await client.zcard(f"{redis_store._prefix}ratelimit:{principal.name}") == 20
    with pytest.raises(RateLimitedError, match="rate limit") as info:
        await a.lease(principal)
    assert 0 < info.value.retry_after_s <= 60


async def test_rate_credit_is_only_for_rate_only_keys(redis_store) -> None:
    settings = _settings("mk-slots", requests_per_minute=20, max_concurrent_requests=5)
    guard = Guard(settings, redis_store, dev_mode=False)
    principal = guard.authenticate("mk-slots")
    lease = await guard.lease(principal)
    assert guard.admission(principal).rate_credit == 1 and not guard.take_credit(principal)
    await lease.release()


async def test_the_router_admits_from_its_credit_and_refuses_as_before(macaron_cache_dir, redis_url) -> None:
    """Through a real router: a rate-only key of 3 requests a minute is admitted by the store once (3 granted),
    twice from the router's credit, then refused with RESOURCE_EXHAUSTED and retry information, as without credit."""
    key = "mk-router-credit"
    auth = _settings(key, requests_per_minute=3)
    store = RedisStore(redis_url, timeout_s=2.0, key_prefix=f"test-credit-{uuid.uuid4().hex[:8]}:")
    async with _router_with_limits(macaron_cache_dir, key, auth, store, CountingClassifier()) as (router, generate):
        for _ in range(3):
            outcome = await generate()
            assert outcome is None or outcome.code() != grpc.StatusCode.RESOURCE_EXHAUSTED
        refused = await generate()
        assert refused is not None and refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "rate limit of 3 requests per minute" in (refused.details() or "")
        keys = {k for k, _ in refused.trailing_metadata() or ()}
        assert "grpc-status-details-bin" in keys  # RetryInfo, as before
        sample = router.metrics.registry.get_sample_value
        assert sample("macaron_router_admissions_total", {"source": "credit"}) == 2
        assert sample("macaron_router_admissions_total", {"source": "store"}) == 2
