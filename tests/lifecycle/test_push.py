"""Version states pushed to routers (router.lifecycle.state_push): real Redis, real engines, two routers.

Checked: a change made through one router is held by both before the operation returns (the writer waits for
the acknowledgements), with no request in between; requests then read no state from the store; a change that
reaches no subscriber (written without announcing, as a lost message) and a router whose subscription connection
is killed both converge through the periodic re-read; with state_push off, requests read the states as before.
"""

from __future__ import annotations

import asyncio
import time

import redis.asyncio as aioredis
from prometheus_client import generate_latest

from macaron.config import MacaronSettings
from macaron.lifecycle.store import VersionStore
from macaron.lifecycle.versions import HistoryEntry
from macaron.v1 import admin_pb2
from macaron.v1 import common_pb2 as pb

RESYNC_S = 0.5


def with_lifecycle(settings: MacaronSettings, **updates: object) -> MacaronSettings:
    lifecycle = settings.router.lifecycle.model_copy(update=updates)
    return settings.model_copy(update={"router": settings.router.model_copy(update={"lifecycle": lifecycle})})


async def generate(stub, session: str = "") -> pb.GenerateChunk:
    request = pb.GenerateRequest(session_id=session, messages=[pb.ChatMessage(role=pb.ROLE_USER, content="python code")],
                                 sampling=pb.SamplingParams(max_new_tokens=2, temperature=0.0))
    return [c async for c in stub.Generate(request, timeout=60)][0]


async def converged(servers, check, bound_s: float) -> bool:
    """Waits (at most bound_s) until `check(state)` holds on every router's in-memory code state."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        if all(check(s.core.versions.last_states["code"]) for s in servers):
            return True
        await asyncio.sleep(0.05)
    return False


def reads(server, source: str) -> float:
    value = server.metrics.registry.get_sample_value("macaron_router_state_reads_total", {"source": source})
    return value or 0.0


async def test_a_change_is_held_by_every_router_before_the_operation_returns(routers, version_stack) -> None:
    a, stub_a, admin_a = await routers.start()
    b, stub_b, _ = await routers.start()
    assert a.core.versions.pushed and b.core.versions.pushed
    await admin_a.LoadAdapter(admin_pb2.LoadAdapterRequest(ref="code@v2", path=str(version_stack.adapters["v2"])),
                              timeout=120)
    await admin_a.StartCanary(admin_pb2.StartCanaryRequest(ref="code@v2", share=1.0), timeout=30)
    # no request in between, no wait: both routers hold the canary when the call returns
    assert [s.core.versions.last_states["code"].canary for s in (a, b)] == ["v2", "v2"]
    assert b.core.versions.follower is not None and b.core.versions.follower.messages >= 2
    before = reads(b, "store")
    first = await generate(stub_b)
    assert first.route.adapter_version == "v2"
    assert reads(b, "push") >= 1 and reads(b, "store") == before  # routed by the pushed states, none read
    shown = generate_latest(b.metrics.registry).decode()
    assert 'macaron_router_admissions_total{source="store"}' in shown  # the first request of the key: store credit
    await admin_a.Rollback(admin_pb2.RollbackRequest(specialist="code"), timeout=30)
    assert [s.core.versions.last_states["code"].canary for s in (a, b)] == ["", ""]
    assert (await generate(stub_b)).route.adapter_version == "v1"
    credit = b.metrics.registry.get_sample_value("macaron_router_admissions_total", {"source": "credit"})
    assert credit is not None and credit >= 1  # the key's next requests: admitted from the router's credit


async def test_a_missed_message_and_a_dropped_subscription_heal_within_the_resync(routers, settings, redis_url,
                                                                                   version_stack) -> None:
    fast = with_lifecycle(settings, state_resync_s=RESYNC_S)
    a, _, admin_a = await routers.start(settings=fast)
    b, _, _ = await routers.start(settings=fast)
    await admin_a.LoadAdapter(admin_pb2.LoadAdapterRequest(ref="code@v2", path=str(version_stack.adapters["v2"])),
                              timeout=120)
    # a change nobody announces (a lost message, or a writer without push): the periodic re-read brings it
    silent = VersionStore(a.core.versions.versions.store, a.core.versions.versions.defaults)
    state = await silent.read("code")
    await silent.write(state.changed(canary="v2", canary_share=0.5), HistoryEntry(time.time(), "test", "canary", "v2"))
    assert await converged([a, b], lambda st: st.canary == "v2" and st.canary_share == 0.5, 20 * RESYNC_S)

    # router b's subscription connection is killed on the server: it resubscribes (re-reading on the way)
    client = aioredis.Redis.from_url(redis_url)
    try:
        killed = 0
        for info in await client.client_list():
            if info.get("name") == routers.client_name(1) and "P" in info.get("flags", ""):
                await client.client_kill_filter(_id=info["id"])
                killed += 1
        assert killed == 1
    finally:
        await client.aclose()
    await admin_a.StartCanary(admin_pb2.StartCanaryRequest(ref="code@v2", share=0.75), timeout=30)
    assert await converged([a, b], lambda st: st.canary_share == 0.75, 20 * RESYNC_S)
    follower = b.core.versions.follower
    assert follower is not None
    deadline = time.monotonic() + 20 * RESYNC_S
    while not follower.subscribed and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert follower.subscribed
    # subscribed again: the next change is acknowledged by b before the operation returns
    await admin_a.StartCanary(admin_pb2.StartCanaryRequest(ref="code@v2", share=0.25), timeout=30)
    assert b.core.versions.last_states["code"].canary_share == 0.25


async def test_without_push_every_request_reads_the_states(routers, settings) -> None:
    server, stub, _ = await routers.start(settings=with_lifecycle(settings, state_push=False))
    assert server.core.versions.follower is None and not server.core.versions.pushed
    await generate(stub)
    assert reads(server, "store") == 1 and reads(server, "push") == 0
