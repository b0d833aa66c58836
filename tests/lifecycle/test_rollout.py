"""A full rollout under steady traffic, with real engines, specialists, Redis and two routers.

load code@v2 → canary 20 % → promote → unload code@v1, while four clients run two-turn sessions
alternating between two routers; then the same with a rollback (code@v3). Checked: every request
succeeds, the canary's share of the sessions started during the canary is 20 % ± 12 points
(at least 52 sessions: more than 2 standard deviations, and session ids are fixed, so the draw is the same each run), no session changes version mid-session
(except, after a rollback, sessions of the rolled-back canary, which go back to stable: that is
what a rollback is for), and the engines never reload the base (their start time and base weight
bytes in /server_info do not change).
"""

from __future__ import annotations

import asyncio
import time

import grpc
import httpx
import pytest

from macaron.lifecycle.traffic import SessionTraffic
from macaron.v1 import admin_pb2
from macaron.v1 import common_pb2 as pb

pytestmark = pytest.mark.slow

SHARE = 0.20
SHARE_TOLERANCE = 0.12
MIN_CANARY_SESSIONS = 60


def base_fingerprint(urls: list[str]) -> list[tuple[float, int]]:
    """What a base reload would change: the engine's start time and its base weight bytes."""
    out = []
    for url in urls:
        info = httpx.get(f"{url}/server_info", timeout=10).json()
        out.append((info["startup_time"], info["memory_usage"]["base_weight_bytes"]))
    return out


def loaded(urls: list[str]) -> list[set[str]]:
    return [{c["id"] for c in httpx.get(f"{u}/v1/models", timeout=10).json()["data"] if c.get("parent")} for u in urls]


async def wait_sessions(traffic: SessionTraffic, count: int, timeout: float = 240.0) -> None:
    target = traffic.sessions_started + count
    deadline = time.monotonic() + timeout
    while traffic.sessions_started < target:
        assert time.monotonic() < deadline, f"traffic stalled at {traffic.sessions_started} sessions"
        assert not traffic.failed(), traffic.failed()[:3]
        await asyncio.sleep(0.1)


def canary_share(traffic: SessionTraffic, canary: str, since: float, until: float) -> tuple[float, int]:
    firsts = [t[0] for t in traffic.sessions().values() if t[0].turn == 0 and since <= t[0].started < until]
    return sum(t.version == canary for t in firsts) / max(1, len(firsts)), len(firsts)


async def test_full_rollout_and_rollback_under_traffic(routers, version_stack) -> None:
    a, stub_a, admin_a = await routers.start()
    b, stub_b, admin_b = await routers.start()
    urls = version_stack.engine_urls
    before = base_fingerprint(urls)
    traffic = SessionTraffic([stub_a, stub_b], clients=4, turns=2)
    traffic.start()
    try:
        await wait_sessions(traffic, 8)
        # -- load, canary 20 %, promote, unload the old version
        state = await admin_a.LoadAdapter(admin_pb2.LoadAdapterRequest(
            ref="code@v2", path=str(version_stack.adapters["v2"]), reason="test rollout"), timeout=120)
        assert "v2" in [v.version for v in state.versions] and state.stable == "v1"
        assert all("code@v2" in names for names in loaded(urls))
        t_canary = time.monotonic()
        await admin_b.StartCanary(admin_pb2.StartCanaryRequest(ref="code@v2", share=SHARE), timeout=30)
        await wait_sessions(traffic, MIN_CANARY_SESSIONS)
        t_promote = time.monotonic()
        state = await admin_a.Promote(admin_pb2.PromoteRequest(specialist="code", reason="canary fine"), timeout=30)
        assert state.stable == "v2" and not state.canary
        await wait_sessions(traffic, 8)
        t_unload = time.monotonic()
        state = await admin_a.UnloadAdapter(admin_pb2.UnloadAdapterRequest(ref="code@v1"), timeout=120)
        assert "v1" not in [v.version for v in state.versions]
        assert all("code@v1" not in names and "code@v2" in names for names in loaded(urls))
        await wait_sessions(traffic, 8)
        # -- the same with a rollback
        await admin_a.LoadAdapter(admin_pb2.LoadAdapterRequest(ref="code@v3", path=str(version_stack.adapters["v3"])),
                                  timeout=120)
        t_canary3 = time.monotonic()
        await admin_a.StartCanary(admin_pb2.StartCanaryRequest(ref="code@v3", share=SHARE), timeout=30)
        await wait_sessions(traffic, MIN_CANARY_SESSIONS)
        t_rollback = time.monotonic()
        await admin_b.Rollback(admin_pb2.RollbackRequest(specialist="code", reason="test rollback"), timeout=30)
        rolled_back_at = time.monotonic()
        await wait_sessions(traffic, 8)
    finally:
        await traffic.stop()

    failed = traffic.failed()
    assert not failed, f"{len(failed)} of {len(traffic.results)} requests failed: {failed[:3]}"
    assert all(t.specialist == pb.SPECIALIST_KIND_CODE for t in traffic.results)
    share2, n2 = canary_share(traffic, "v2", t_canary, t_promote)
    share3, n3 = canary_share(traffic, "v3", t_canary3, t_rollback)
    print(f"rollout: {len(traffic.results)} requests, {len(traffic.sessions())} sessions; "
          f"v2 canary {share2:.0%} of {n2} sessions, v3 canary {share3:.0%} of {n3}")
    assert n2 >= MIN_CANARY_SESSIONS - 8 and n3 >= MIN_CANARY_SESSIONS - 8, (n2, n3)
    assert abs(share2 - SHARE) <= SHARE_TOLERANCE, f"code@v2 took {share2:.0%} of {n2} sessions"
    assert abs(share3 - SHARE) <= SHARE_TOLERANCE, f"code@v3 took {share3:.0%} of {n3} sessions"
    switched = {name: [t.version for t in traffic.sessions()[name]] for name in traffic.switched(frozenset({"v3"}))}
    degraded = a.metrics.store_errors._value.get() + b.metrics.store_errors._value.get()
    assert not switched, f"sessions changed version mid-session: {switched} (store errors: {degraded})"
    # which version served when: v1 never after its unload, v3 never after the rollback returned
    assert not [t for t in traffic.results if t.version == "v1" and t.started > t_unload + 0.5]
    assert not [t for t in traffic.results if t.version == "v3" and t.started > rolled_back_at]
    assert {t.version for t in traffic.results} == {"v1", "v2", "v3"}
    assert base_fingerprint(urls) == before, "an engine restarted or reloaded its base weights"
    listed = await admin_a.ListAdapters(admin_pb2.ListAdaptersRequest(history_limit=10), timeout=10)
    code = next(s for s in listed.specialists if s.specialist == "code")
    assert [h.action for h in code.history] == ["load", "canary", "promote", "unload", "load", "canary", "rollback"]
    assert code.history[-1].reason == "test rollback" and code.history[-1].actor == "dev"


async def test_a_change_on_one_router_is_obeyed_by_the_other_at_once(routers, version_stack) -> None:
    _, stub_a, admin_a = await routers.start()
    b, stub_b, _ = await routers.start()
    await admin_a.LoadAdapter(admin_pb2.LoadAdapterRequest(ref="code@v2", path=str(version_stack.adapters["v2"])),
                              timeout=120)
    await admin_a.StartCanary(admin_pb2.StartCanaryRequest(ref="code@v2", share=1.0), timeout=30)

    async def version_on(stub, session: str) -> str:
        request = pb.GenerateRequest(session_id=session, messages=[pb.ChatMessage(role=pb.ROLE_USER, content="python code")],
                                     sampling=pb.SamplingParams(max_new_tokens=2, temperature=0.0))
        chunks = [c async for c in stub.Generate(request, timeout=60)]
        return chunks[0].route.adapter_version

    assert await version_on(stub_b, "x-1") == "v2"  # a canary of 100 %: every new session
    from prometheus_client import generate_latest

    shown = generate_latest(b.metrics.registry).decode()
    assert 'macaron_router_canary_share_ratio{specialist="code",version="v2"} 1.0' in shown
    assert 'macaron_router_version_decisions_total{reason="canary",specialist="code",version="v2"} 1.0' in shown
    await admin_a.Rollback(admin_pb2.RollbackRequest(specialist="code"), timeout=30)
    assert await version_on(stub_b, "x-2") == "v1"  # the very next request on the other router
    assert await version_on(stub_b, "x-1") == "v1"  # a session of the rolled-back canary too
    shown = generate_latest(b.metrics.registry).decode()
    assert 'macaron_router_canary_share_ratio{specialist="code",version="v2"} 0.0' in shown
    state = await admin_a.UnloadAdapter(admin_pb2.UnloadAdapterRequest(ref="code@v2"), timeout=120)
    assert [v.version for v in state.versions] == [] and state.stable == "v1"


async def test_admin_service_needs_an_admin_key_and_says_what_is_wrong(routers, settings) -> None:
    from macaron.auth import hash_api_key
    from macaron.auth.settings import ApiKeyEntry

    keyed = settings.model_copy(deep=True)
    keyed.router.lifecycle.admin_keys = [ApiKeyEntry(name="ops", sha256=hash_api_key("mk-admin"))]
    _, _, admin = await routers.start(settings=keyed)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await admin.ListAdapters(admin_pb2.ListAdaptersRequest(), timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    listed = await admin.ListAdapters(admin_pb2.ListAdaptersRequest(), timeout=10,
                                      metadata=(("authorization", "Bearer mk-admin"),))
    assert {s.specialist for s in listed.specialists} == {"chat", "agent", "code", "ui"}
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await admin.StartCanary(admin_pb2.StartCanaryRequest(ref="code", share=0.2), timeout=10,
                                metadata=(("authorization", "Bearer mk-admin"),))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "code@v2" in err.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await admin.Promote(admin_pb2.PromoteRequest(specialist="code"), timeout=10,
                            metadata=(("authorization", "Bearer mk-admin"),))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
