"""Pending head claims: sessions of one head placed before any engine reported it meet on one replica.

Two real embedded engines publish KV-cache events and two router instances (RoutingCore) follow them, sharing a
real Redis placement store. Nothing is served before the sessions are placed, so no engine has reported the head:
only the claims the routers write when they place it can group the sessions (the spread scorer alone sends the
second session to the replica with fewer sessions).
"""

from __future__ import annotations

import asyncio
import uuid

from macaron.router.placement.pickers import rendezvous
from macaron.router.routing import RouteRequest, RoutingCore
from macaron.router.sessions import SessionView
from macaron.store import RedisStore
from specialist.processes import free_port

from .test_kv_index import REPLICAS, app_session, following, make_core, start_session
from .test_kv_index import engines  # noqa: F401 - the fixture

GROUP = {"head_group": {"max_excess": 4}}
"""Room for four sessions on one replica, so grouping (not the session-count limit) decides these placements."""


def kv_keys(core: RoutingCore, i: int) -> tuple[str, ...]:
    return core.placement_request(RouteRequest(app_session(i), owner="o"), "chat").kv_keys


def head_blocks(core: RoutingCore) -> int:
    """KV blocks the sessions' prompts share (the application's head)."""
    return next(n for n, (x, y) in enumerate(zip(kv_keys(core, 0), kv_keys(core, 1))) if x != y)


def shared_store(redis_url: str, prefix: str) -> RedisStore:
    return RedisStore(redis_url, timeout_s=2.0, key_prefix=prefix)


async def two_routers(tokenizer, engines, redis_url: str, **settings) -> tuple[RoutingCore, RoutingCore]:
    prefix = f"test-pend-{uuid.uuid4().hex[:8]}:"
    cores = [make_core(tokenizer, engines, shared_store(redis_url, prefix), **{**GROUP, **settings}) for _ in range(2)]
    for core in cores:
        await following(core)  # both replicas publish events: the index knows they hold nothing of the head
    return cores[0], cores[1]


async def test_sessions_of_one_head_on_two_routers_meet_before_any_engine_reported_it(tokenizer, engines,
                                                                                       redis_url) -> None:
    a, b = await two_routers(tokenizer, engines, redis_url)
    try:
        first = await start_session(a, 0)
        assert first.snapshot.precise == frozenset(REPLICAS) and not first.snapshot.prefix_share.get(first.replica)
        second = await start_session(b, 1)  # the other router: it knows of the head only through the claim
        assert second.replica == first.replica
        assert second.snapshot.claimed == {first.replica: head_blocks(a)}
        # two more at once, one on each router: both join the claimed replica
        more = await asyncio.gather(start_session(a, 2), start_session(b, 3))
        assert {r.replica for r in more} == {first.replica}
        assert engines.serve(first.replica, a.prompt_tokens(a.prompt_text(app_session(0), "chat"))) == 0  # truly none
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_claim_expires(tokenizer, engines, redis_url) -> None:
    a, b = await two_routers(tokenizer, engines, redis_url, head_group={**GROUP["head_group"], "pending_ttl_s": 0.3})
    try:
        first = await start_session(a, 0)
        await asyncio.sleep(0.5)
        second = await start_session(b, 1)
        assert second.snapshot.claimed == {}
        assert second.replica != first.replica  # no claim, no report: spread by session count
        keys = a.pending.keys(kv_keys(a, 0))  # the head is now claimed anew, for the second session's replica
        assert (await a.cache_store.hgetall_many_depths_and_claims([], "marks", [], keys))[2] == {
            second.replica: head_blocks(a)}
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_claim_never_pulls_a_session_from_its_replica(tokenizer, engines, redis_url) -> None:
    a, b = await two_routers(tokenizer, engines, redis_url)
    try:
        claimed = (await start_session(a, 0)).replica
        other = next(r for r in REPLICAS if r != claimed)
        # session s9 of the same head already lives on the other replica (its first turn went there)
        await b.sessions.put("o", "s9", SessionView("chat", "", other, 1))
        route = await b.route(RouteRequest(app_session(9), owner="o", forced="chat", session_id="s9",
                                           request_id=uuid.uuid4().hex))
        route.release()
        assert route.snapshot.claimed == {claimed: route.snapshot.claimed[claimed]}  # it saw the claim
        assert route.replica == other
        assert route.placement.by_scorer["prefix"].get(claimed, 0.0) == 0.0  # and did not count it
    finally:
        await a.aclose()
        await b.aclose()


async def test_with_the_store_down_routing_goes_on_with_this_routers_own_claims(tokenizer, engines) -> None:
    dead = RedisStore(f"redis://127.0.0.1:{free_port()}", timeout_s=0.2, key_prefix="dead:")
    core = make_core(tokenizer, engines, dead, **GROUP)
    try:
        await core.start()
        routes = [await start_session(core, i) for i in range(2)]
        assert all(r.snapshot.degraded for r in routes) and routes[0].replica in REPLICAS
        assert routes[1].replica == routes[0].replica
        assert routes[1].snapshot.claimed == {routes[0].replica: head_blocks(core)}  # kept here, not lost
    finally:
        await core.aclose()


async def test_a_replica_another_routers_new_head_just_landed_on_is_left_to_it(tokenizer, engines, redis_url) -> None:
    """Two routers placing the first sessions of two applications at the same moment both see no session anywhere
    and send each head to its home; where the homes coincide, the heads met there. The first new head to land takes
    its replica for `landing_s`, and the other goes to its next best; with landing off it goes home."""
    a, b = await two_routers(tokenizer, engines, redis_url)
    off, _ = await two_routers(tokenizer, engines, redis_url, head_group={**GROUP["head_group"], "landing_s": 0})
    try:
        request = RouteRequest(app_session(0), owner="o", forced="chat", session_id="s0")
        home = rendezvous(b.placement_request(request, "chat").tie_key, sorted(REPLICAS))
        assert await a.pending.land(home, "another application's head") is None  # it landed first
        assert await b.pending.land(home, "yet another head") == "another application's head"
        moved = await start_session(b, 0)
        assert moved.replica != home and b.metrics.landings_moved._value.get() == 1
        assert await b.pending.land(moved.replica, "a third head") == b.placement_request(request, "chat").tie_key
        assert (await start_session(off, 0)).replica == home  # the same request, landing off: home
        again = await start_session(a, 1)  # a later session of the moved head follows its claim, no landing
        assert again.replica == moved.replica
    finally:
        for core in (a, b, off, _):
            await core.aclose()
