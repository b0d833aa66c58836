"""Version state, version choice, the canary watcher's verdict and the gate, without engines."""

from __future__ import annotations

import uuid

import pytest

from macaron.lifecycle.assign import bucket, choose_version
from macaron.lifecycle.gate import EvalTarget, PromotionGate
from macaron.lifecycle.settings import AutoRollbackSettings
from macaron.lifecycle.store import VersionStore
from macaron.lifecycle.versions import (
    HistoryEntry,
    InvalidRefError,
    SpecialistState,
    VersionInfo,
    engine_name,
    parse_ref,
)
from macaron.lifecycle.watcher import OutcomeWindow, WindowStats, judge
from macaron.store import RedisStore


def test_refs_parse_or_say_what_is_expected() -> None:
    assert parse_ref("code@v3").version == "v3" and str(parse_ref("code@v3")) == "code@v3"
    assert engine_name("code", "v3") == "code@v3" and engine_name("code", "") == "code"
    for bad, words in (("coder@v1", "must be one of"), ("code", "give a version"), ("code@v 1", "1-64")):
        with pytest.raises(InvalidRefError, match=words):
            parse_ref(bad)


STATE = SpecialistState("code", "code", stable="v1", canary="v2", canary_share=0.2,
                        versions={"v2": VersionInfo("/a/v2"), "v0": VersionInfo("", "loaded"),
                                  "vx": VersionInfo("/a/vx", "rolled_back")})


@pytest.mark.parametrize(("session", "available", "expected"), [
    ("v1", {"v1", "v2"}, ("v1", "session")),
    ("v2", {"v1", "v2"}, ("v2", "session")),
    ("v0", {"v0"}, ("v0", "session")),          # an old stable its sessions keep
    ("vx", {"vx"}, ("v1", "retired")),          # rolled back: back to stable at once
    ("v9", set(), ("v1", "retired")),           # unloaded
    ("v2", {"v1"}, ("v1", "retired")),          # no replica has it any more
])
def test_a_session_keeps_its_version_while_it_is_servable(session, available, expected) -> None:
    choice = choose_version(STATE, session_version=session, key="k", available=lambda v: v in available)
    assert (choice.version, choice.reason) == expected


def test_new_sessions_draw_the_canary_share_and_never_wait_for_it() -> None:
    keys = [uuid.uuid4().hex for _ in range(20000)]
    share = sum(choose_version(STATE, session_version=None, key=k).reason == "canary" for k in keys) / len(keys)
    assert abs(share - 0.2) < 0.02
    key = next(k for k in keys if bucket(k, "code@v2") < 0.2)
    assert choose_version(STATE, session_version=None, key=key, available=lambda v: v != "v2").reason == \
        "canary_unavailable"
    assert choose_version(STATE, session_version=None, key=key).version == "v2"  # same key, same draw


def test_state_round_trips_through_json() -> None:
    assert SpecialistState.from_json(STATE.to_json()) == STATE


async def test_state_is_shared_through_redis(redis_url: str) -> None:
    prefix = f"test-versions-{uuid.uuid4().hex[:8]}:"
    one, two = (RedisStore(redis_url, timeout_s=2.0, key_prefix=prefix) for _ in range(2))
    defaults = {"code": SpecialistState.initial("code", "code", "v1")}
    try:
        a, b = VersionStore(one, defaults), VersionStore(two, defaults)
        assert (await b.read("code")).stable == "v1"
        new = STATE.changed(stable="v2", canary="")
        await a.write(new, HistoryEntry(1.0, "ops", "promote", "v2", "looks good"))
        assert (await b.read("code")) == new
        assert [(h.actor, h.action, h.reason) for h in await b.history("code")] == [("ops", "promote", "looks good")]
    finally:
        await one.close()
        await two.close()


def test_the_watcher_judges_error_rate_and_ttft_against_stable() -> None:
    s = AutoRollbackSettings(min_requests=10, max_error_rate_increase=0.05, max_ttft_p95_ratio=2.0, ttft_floor_s=0.05)
    fine = WindowStats(100, 1, 0.1)
    assert judge(WindowStats(9, 9, 1.0), fine, s) is None                     # too few to judge
    assert judge(WindowStats(20, 1, 0.12), fine, s) is None                   # 5 % vs 1 %: within +5 points
    assert "error rate" in judge(WindowStats(20, 3, 0.1), fine, s)            # 15 % vs 1 %
    assert "TTFT p95" in judge(WindowStats(20, 0, 0.25), fine, s)             # 250 ms vs 100 ms
    assert judge(WindowStats(20, 0, 0.09), WindowStats(100, 0, 0.001), s) is None  # floor: 90 ms < 2 x 50 ms
    clock = [0.0]
    window = OutcomeWindow(10.0, clock=lambda: clock[0])
    for code in ("OK", "INTERNAL", "INVALID_ARGUMENT", "CANCELLED"):
        window.record("code", "v2", code=code, ttft_s=0.1)
    assert window.stats("code", "v2") == WindowStats(4, 1, 0.1)  # the caller's errors are not the version's
    clock[0] = 11.0
    assert window.stats("code", "v2").requests == 0


async def test_the_gate_refuses_a_candidate_worse_than_stable_by_more_than_the_margin() -> None:
    scores = {"v1": 0.80, "v2": 0.79, "v3": 0.70}
    gate = PromotionGate(lambda t: scores[t.version], margin=0.02)
    target = lambda v: EvalTarget("code", v, f"code@{v}", "http://r")  # noqa: E731
    assert (await gate.evaluate(target("v2"), target("v1"))).passed
    refused = await gate.evaluate(target("v3"), target("v1"))
    assert not refused.passed and "refused" in refused.reason and "0.7000" in refused.reason

    async def async_scorer(t: EvalTarget) -> float:
        return scores[t.version]

    assert not (await PromotionGate(async_scorer, 0.05).evaluate(target("v3"), target("v1"))).passed


async def test_usage_of_every_router_is_summed_and_a_silent_router_stops_counting(redis_url: str) -> None:
    import asyncio

    from macaron.lifecycle.usage import UsageTracker

    prefix = f"test-usage-{uuid.uuid4().hex[:8]}:"
    store = RedisStore(redis_url, timeout_s=2.0, key_prefix=prefix)
    try:
        versions = VersionStore(store, {"code": SpecialistState.initial("code", "code", "v1")})
        one, two = UsageTracker(store, "r1"), UsageTracker(store, "r2")
        one.begin("code", "v1"), one.begin("code", "v1"), two.begin("code", "v1"), two.begin("code", "v2")
        two.end("code", "v2")
        await one.publish()
        await two.publish()
        usage = await versions.usage("code", stale_s=10.0)
        assert usage["v1"][0] == 3 and usage["v2"][0] == 0 and usage["v2"][1] > 0
        await asyncio.sleep(0.3)
        await one.publish()  # r2 falls silent with one request counted
        assert (await versions.usage("code", stale_s=0.2))["v1"][0] == 2
    finally:
        await store.close()


async def test_usage_changes_go_out_after_the_coalescing_window_every_specialist_in_one_write(redis_url: str) -> None:
    """A request's start and end are published after `coalesce_s` (off its path to the first token), both
    specialists' hashes in one write; the heartbeat (30 s) is not what published them."""
    import asyncio

    from macaron.lifecycle.usage import UsageTracker

    prefix = f"test-usage-{uuid.uuid4().hex[:8]}:"
    store = RedisStore(redis_url, timeout_s=2.0, key_prefix=prefix)
    tracker = UsageTracker(store, "r1", heartbeat_s=30.0, coalesce_s=0.1)
    try:
        versions = VersionStore(store, {n: SpecialistState.initial(n, n, "v1") for n in ("code", "chat")})
        tracker.start()
        await asyncio.sleep(0.05)
        tracker.begin("code", "v1")
        tracker.begin("chat", "v1")
        for _ in range(100):  # published within the window plus a store round trip, long before the heartbeat
            if (await versions.usage("code", stale_s=10.0)).get("v1", (0, 0.0))[0] == 1:
                break
            await asyncio.sleep(0.05)
        assert (await versions.usage("code", stale_s=10.0))["v1"][0] == 1
        assert (await versions.usage("chat", stale_s=10.0))["v1"][0] == 1
        tracker.end("code", "v1")
        for _ in range(100):
            if (await versions.usage("code", stale_s=10.0))["v1"][0] == 0:
                break
            await asyncio.sleep(0.05)
        assert (await versions.usage("code", stale_s=10.0))["v1"][0] == 0
        assert (await versions.usage("chat", stale_s=10.0))["v1"][0] == 1
    finally:
        await tracker.stop()
        await store.close()


def test_usage_coalescing_must_be_shorter_than_the_heartbeat() -> None:
    from pydantic import ValidationError

    from macaron.lifecycle.settings import LifecycleSettings

    with pytest.raises(ValidationError, match="usage_coalesce_s"):
        LifecycleSettings(usage_heartbeat_s=0.3, usage_coalesce_s=0.3)
    assert LifecycleSettings(usage_heartbeat_s=0.3, usage_coalesce_s=0.0).usage_coalesce_s == 0.0
