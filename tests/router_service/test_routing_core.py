"""RoutingCore without gRPC or Redis: the in-process store, fake classifiers, a static replica list."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from macaron.discovery import StaticSource
from macaron.prompting import ChatRequest, Message
from macaron.router.placement import PlacementRequest
from macaron.router.prefix_index import now_ms
from macaron.router.routing import AdapterRef, RouteRequest, RoutingCore
from macaron.router.settings import RouterSettings
from macaron.router.store_gate import GatedStore
from macaron.store import MemoryStore

REPLICAS = ["http://a:1", "http://b:1", "http://c:1"]
NAMES = ("chat", "agent", "code", "ui")


class TemplateTokenizer:
    """Enough of a chat template for rendering: role tags around contents."""

    def apply_chat_template(self, conversation, **kwargs) -> str:
        text = "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in conversation)
        return text + ("<assistant>" if kwargs.get("add_generation_prompt") else "")

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        return {"input_ids": [ord(ch) for ch in text]}  # one token per character


@dataclass
class Result:
    specialist: str
    probabilities: dict[str, float]
    confidence: float


class Fixed:
    """Always the same answer."""

    def __init__(self, name: str, p: float) -> None:
        self.result = Result(name, {n: (p if n == name else (1 - p) / 3) for n in NAMES}, p)

    def classify(self, text=None, *, messages=None, tools=None):
        return self.result


class Escalating(Fixed):
    """Unsure on the fast path; the full call takes 0.3 s of blocking work and is sure."""

    escalation_enabled = True
    threshold = 0.8

    def __init__(self) -> None:
        super().__init__("code", 0.95)
        self.unsure = Result("chat", {n: 0.25 for n in NAMES}, 0.25)
        self.full_threads: list[str] = []

    def classify(self, text=None, *, messages=None, tools=None, escalate=None):
        if escalate is False:
            return self.unsure
        self.full_threads.append(threading.current_thread().name)
        time.sleep(0.3)
        return self.result


def core(classifier, store=None, *, cache=None, **settings) -> RoutingCore:
    """A core on `store` (placement state on `cache` when given, else on the same store)."""
    profiles = {n: SimpleNamespace(system_prompt=f"You are {n}. " * 40, tool_call_prefix="") for n in NAMES}
    return RoutingCore(
        RouterSettings(**settings), store=GatedStore(store or MemoryStore()),
        cache_store=GatedStore(cache) if cache is not None else None, profiles=profiles,
        adapters={n: AdapterRef(n) for n in NAMES}, tokenizer=TemplateTokenizer(),
        discovery=StaticSource(REPLICAS), classifier=classifier, judge=None, router_id="t",
    )


def request(*texts: str, session: str = "") -> RouteRequest:
    return RouteRequest(ChatRequest(tuple(Message("user", t) for t in texts)), owner="o", session_id=session)


async def test_session_and_prefix_are_written_only_once_the_first_token_went_out() -> None:
    store = MemoryStore()
    c = core(Fixed("code", 0.95), store)
    first = await c.route(request("write a parser for this file format", session="s"))
    first.release()  # never committed: the request was not served
    await c.flush()
    assert await c.read_session("o", "s") is None
    served = await c.route(request("write a parser for this file format", session="s"))
    served.commit()
    served.release()
    await c.flush()
    session = await c.read_session("o", "s")
    assert session is not None and session.specialist == "code" and session.replica == served.replica
    # another core on the same store (another router replica) agrees on the replica of that prefix
    other = core(Fixed("code", 0.95), store)
    again = await other.route(request("write a parser for this file format", "and add tests to it", session="s2"))
    assert again.replica == served.replica and again.snapshot is not None and again.snapshot.prefix
    await c.aclose()
    await other.aclose()


async def test_escalation_runs_off_the_event_loop() -> None:
    classifier = Escalating()
    c = core(classifier)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.ensure_future(ticker())
    try:
        decision, _ = await c.decide(request("something ambiguous to classify"))
    finally:
        task.cancel()
    assert decision.specialist == "code" and decision.reason == "classifier"
    assert classifier.full_threads and classifier.full_threads[0] != threading.main_thread().name
    assert ticks >= 10  # the loop kept running during the 0.3 s escalation
    await c.aclose()


async def test_the_router_asks_again_where_the_classifier_says_the_encoder_could_change_it() -> None:
    """`refinable` on the fast answer decides the second call, not the threshold alone: a conversation turn sure
    enough not to escalate (0.85 > 0.8) whose follow-up model would read the turn's embedding is asked again; an
    unsure answer the encoder cannot change (refinable False) is not."""

    @dataclass
    class Refinable(Result):
        refinable: bool = False

    class Says(Escalating):
        def __init__(self, fast: Result) -> None:
            super().__init__()
            self.unsure = fast
            self.calls = 0

        def classify(self, text=None, *, messages=None, tools=None, escalate=None):
            if escalate is not False:
                self.calls += 1
            return self.unsure if escalate is False else self.result

    sure_but_refinable = Says(Refinable("chat", {n: (0.85 if n == "chat" else 0.05) for n in NAMES}, 0.85, True))
    c = core(sure_but_refinable)
    decision, _ = await c.decide(request("write a parser", "what do you mean?"))
    assert sure_but_refinable.calls == 1 and decision.specialist == "code"
    await c.aclose()
    unsure_final = Says(Refinable("chat", {n: 0.25 for n in NAMES}, 0.25, False))
    c = core(unsure_final)
    decision, _ = await c.decide(request("something ambiguous to classify"))
    assert unsure_final.calls == 0 and decision.specialist == "chat"
    await c.aclose()


async def test_a_dead_store_routes_by_the_classifier_alone() -> None:
    class Dead(MemoryStore):
        async def hgetall_many(self, keys):
            from macaron.store import StoreUnavailableError

            raise StoreUnavailableError("down")

    c = core(Fixed("agent", 0.9), Dead(), store_retry_s=60)
    route = await c.route(request("book a table for two tonight", session="s"))
    assert route.decision.specialist == "agent" and route.replica in REPLICAS and c.degraded
    started = time.perf_counter()
    await c.route(request("book a table for two tonight", session="s"))
    assert time.perf_counter() - started < 0.5  # skipped, not waited for
    await c.aclose()


async def test_the_approximate_index_learns_from_cached_tokens_and_restarts() -> None:
    """Replicas without KV-cache events: an over-claim shrinks that replica's retention (its capacity
    model), a right claim does not, and a restart forgets what was sent before it."""
    c = core(Fixed("code", 0.95))
    first = await c.route(request("write a parser for this file format", session="s"))
    first.commit()
    first.release()
    await c.flush()
    again = await c.route(request("write a parser for this file format", session="s2"))
    again.release()
    replica = again.replica
    assert again.index_source == "approximate" and again.predicted_cached_tokens > 0
    assert c.observe_cached(again, cached_tokens=10**6) is False  # the engine held all of it: no change
    assert replica not in c.snapshots.retention_ms
    assert c.observe_cached(again, cached_tokens=0) is True  # it held nothing: it keeps prefixes less long
    assert c.snapshots.retention_ms[replica] == 1000
    await asyncio.sleep(1.1)
    later = await c.route(request("write a parser for this file format", session="s3"))
    later.release()
    assert later.snapshot.prefix_share.get(replica, 0.0) == 0.0
    # a restart (a new start time in its server info) forgets what was sent before it
    c.snapshots.retention_ms.clear()
    assert (await c.route(request("write a parser for this file format"))).snapshot.prefix_share.get(replica)
    c._plain_replica(replica, time.time() + 1)
    assert not (await c.route(request("write a parser for this file format"))).snapshot.prefix_share.get(replica)
    await c.aclose()


class SlowStore(MemoryStore):
    """Every read takes 50 ms; records how many reads were in flight at once."""

    def __init__(self, in_flight: list[int]) -> None:
        super().__init__()
        self.in_flight = in_flight

    async def hgetall_many(self, keys):
        self.in_flight[0] += 1
        self.in_flight[1] = max(self.in_flight[1], self.in_flight[0])
        try:
            await asyncio.sleep(0.05)
            return await super().hgetall_many(keys)
        finally:
            self.in_flight[0] -= 1


def read_ahead(c: RoutingCore, outcome: str) -> float:
    return c.metrics.registry.get_sample_value("macaron_router_read_ahead_total", {"outcome": outcome}) or 0.0


@pytest.mark.parametrize("push", [False, True])
async def test_the_placement_read_overlaps_the_state_read_when_the_specialist_is_known_first(push: bool) -> None:
    """A forced specialist, or a request without a session (decided before any read), reads the placement
    state alongside the version states: one round trip of latency. A session's turn reads its session first.
    A wrong guess (say the version states changed meanwhile) is read again and placed like any other. With the
    version states pushed (held in memory), a request without a session reads no state at all: the placement
    read is the only one."""
    in_flight = [0, 0]
    c = core(Fixed("code", 0.95), SlowStore(in_flight), cache=SlowStore(in_flight), lifecycle={"state_push": push})
    await c.start()
    try:
        first = await c.route(request("write a parser for this file format", session="s"))
        first.commit()
        first.release()
        await c.flush()
        assert read_ahead(c, "none") == 1 and in_flight[1] == 1  # the session first, then the placement
        in_flight[1] = 0
        forced = await c.route(RouteRequest(ChatRequest((Message("user", "hello there"),)), owner="o", forced="ui"))
        forced.release()
        plain = await c.route(request("write a parser for this file format", "now add tests"))
        plain.release()
        assert read_ahead(c, "hit") == 2 and in_flight[1] == (1 if push else 2)
        states = c.metrics.registry.get_sample_value
        assert states("macaron_router_state_reads_total", {"source": "push" if push else "store"}) == 3
        assert forced.decision.specialist == "ui" and plain.decision.specialist == "code"
        assert plain.replica == first.replica and plain.snapshot.prefix.get(first.replica)
        c._guess = lambda req, specialist=None: ("ui", "")  # as if it had guessed wrong
        moved = await c.route(request("write a parser for this file format", "and a printer"))
        moved.release()
        assert read_ahead(c, "miss") == 1 and moved.decision.specialist == "code"
        assert moved.replica == first.replica and moved.snapshot.prefix.get(first.replica)
    finally:
        await c.aclose()


@pytest.mark.parametrize(("max_excess", "spread"), [(0, [2, 2, 2]), (2, [1, 2, 3])])
async def test_new_sessions_pile_behind_their_head_only_within_bounds_and_continuing_ones_stay(max_excess, spread) -> None:
    """Sessions that share a system prompt (over half of each first prompt) would all follow its cached head (or
    its home hash) to one replica; the spread scorer lets them join the head's holders only while those are
    fewer than `max_excess` sessions above the least used replica (no engine reports a capacity here), then
    spreads them; with max_excess 0 it spreads every new session where the fewest were placed. A session's next
    turn stays with its replica."""
    c = core(Fixed("chat", 0.95), head_group={"max_excess": max_excess})
    system = "You are the assistant of the harbour office. " * 2
    first: dict[str, str] = {}
    for i in range(6):
        req = RouteRequest(ChatRequest((Message("system", system),
                                        Message("user", f"question number {i}: " + "some details " * 30))),
                           owner="o", session_id=f"s{i}")
        route = await c.route(req)
        route.commit()
        route.release()
        await c.flush()
        first[f"s{i}"] = route.replica
    assert sorted(list(first.values()).count(r) for r in REPLICAS) == spread
    for forced in (None, "chat"):  # a forced specialist keeps its session's replica too
        for i in range(6):
            req = RouteRequest(ChatRequest((Message("system", system),
                                            Message("user", f"question number {i}: " + "some details " * 30),
                                            Message("assistant", "an answer"), Message("user", "and then?"))),
                               owner="o", session_id=f"s{i}", forced=forced)
            route = await c.route(req)
            assert route.replica == first[f"s{i}"]
            assert route.session is not None and route.session.replica == first[f"s{i}"]
            route.commit()
            route.release()
            await c.flush()
    counts = (await c.snapshots.read(PlacementRequest("chat", ("x",)))).sessions
    assert sorted(counts.values()) == spread  # continuing turns are not counted as new sessions
    await c.aclose()


async def test_a_route_reports_where_its_time_went() -> None:
    c = core(Escalating())
    route = await c.route(request("which one is it?"))
    t = route.times
    assert t.classify_ms >= 250  # the escalation's 0.3 s of work
    assert t.state_read_ms >= 0 and t.placement_ms > 0 and t.judge_ms == 0
    assert route.route_ms >= t.classify_ms
    route.release()
    await c.aclose()


async def test_the_limit_gate_is_awaited_before_anything_is_placed() -> None:
    c = core(Fixed("code", 0.95))

    async def over_limit() -> None:
        raise PermissionError("over the limit")

    gate = asyncio.ensure_future(over_limit())
    try:
        await c.route(request("write a parser", session="s"), gate=gate)
    except PermissionError:
        pass
    else:
        raise AssertionError("the gate's error did not stop the route")
    assert c.tracker.local == {} or not any(c.tracker.local.values())
    assert not c.snapshots.own_sessions(now_ms())  # no session counted
    await c.flush()
    assert await c.read_session("o", "s") is None
    await c.aclose()


async def test_the_states_read_is_sent_before_the_classifier_holds_the_loop() -> None:
    """Without a session the decision runs while the version states are read; the read must be on the wire
    first, even through a store that runs each call in a task of its own (as a deadline wrapper does)."""
    events: list[str] = []

    class Wrapped(MemoryStore):
        async def hgetall_many(self, keys):
            async def send():
                events.append("sent")
                return await MemoryStore.hgetall_many(self, keys)

            return await asyncio.wait_for(send(), 1.0)

    class Recording(Fixed):
        def classify(self, text=None, *, messages=None, tools=None):
            events.append("classify")
            return super().classify(text, messages=messages, tools=tools)

    c = core(Recording("code", 0.95), Wrapped())
    route = await c.route(request("write a parser for this file format"))
    route.release()
    assert events[:2] == ["sent", "classify"]
    await c.aclose()


async def test_an_over_limit_gate_stops_the_escalation() -> None:
    """The limit check runs beside the fast classifier; the escalation (tens of ms of CPU) waits for it."""
    classifier = Escalating()
    c = core(classifier)

    async def over_limit() -> None:
        raise PermissionError("over the limit")

    try:
        await c.route(request("which one is it?"), gate=asyncio.ensure_future(over_limit()))
    except PermissionError:
        pass
    else:
        raise AssertionError("the gate's error did not stop the route")
    assert classifier.full_threads == []  # never escalated
    await c.aclose()
