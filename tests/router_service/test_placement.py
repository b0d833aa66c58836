"""Placement units as table tests: scorers, pickers, the balance guard, profiles, the prefix chain, the load merge."""

from __future__ import annotations

import asyncio

import pytest

from macaron.router.placement import PlacementProfile, PlacementRequest, Snapshot, WeightedScorer, build_profile
from macaron.router.placement.filters import HealthyFilter
from macaron.router.placement.pickers import BalanceGuard, MaxScorePicker, RoundRobinPicker, rendezvous
from macaron.router.placement.scorers import (
    LoadScorer,
    PrefixHomeScorer,
    PrefixScorer,
    SessionScorer,
    SessionSpreadScorer,
)
from macaron.router.kv_index.pending import PendingClaims
from macaron.router.placement.shared_counts import SharedCounts
from macaron.router.placement.snapshot import LoadTracker, SnapshotReader, spread_keys
from macaron.router.placement.types import NoReplicaError
from macaron.router.prefix_index import PrefixIndex, block_hashes, block_keys, head_block, matched_blocks, now_ms
from macaron.router.settings import HeadGroupSettings, RouterSettings
from macaron.store import MemoryStore

A, B, C = "http://a:1", "http://b:1", "http://c:1"
REQ = PlacementRequest("chat", tie_key="k")
WINDOW_S = 10**7
"""The session-spread window of the readers below: long, so that no test crosses into a new window (the kept
counts are of one window's keys; a new window is read inline, which a timing test would see as a miss)."""


@pytest.mark.parametrize(
    ("load", "expected"),
    [
        ({A: 0, B: 0, C: 0}, {A: 1.0, B: 1.0, C: 1.0}),
        ({A: 0, B: 5, C: 10}, {A: 1.0, B: 0.5, C: 0.0}),
        ({B: 4}, {A: 1.0, B: 0.0, C: 1.0}),
    ],
)
def test_load_scorer(load, expected) -> None:
    assert LoadScorer().score(REQ, [A, B, C], Snapshot(load=load)) == expected


@pytest.mark.parametrize(
    ("prefix", "total", "expected"),
    [
        ({A: 4, B: 2}, 4, {A: 1.0, B: 0.5, C: 0.0}),
        ({}, 4, {A: 0.0, B: 0.0, C: 0.0}),
        ({A: 3}, 0, {A: 0.0, B: 0.0, C: 0.0}),
    ],
)
def test_prefix_scorer(prefix, total, expected) -> None:
    assert PrefixScorer().score(REQ, [A, B, C], Snapshot(prefix=prefix, total_blocks=total)) == expected


def test_session_scorer() -> None:
    req = PlacementRequest("chat", session_replica=B)
    assert SessionScorer().score(req, [A, B], Snapshot()) == {A: 0.0, B: 1.0}
    assert SessionScorer().score(REQ, [A, B], Snapshot()) == {A: 0.0, B: 0.0}


@pytest.mark.parametrize(
    ("session_replica", "sessions", "expected"),
    [
        (None, {A: 4, B: 2, C: 0}, {A: 0.0, B: 0.5, C: 1.0}),
        (None, {}, {A: 1.0, B: 1.0, C: 1.0}),
        (None, {B: 3}, {A: 1.0, B: 0.0, C: 1.0}),
        (A, {A: 4, B: 2, C: 0}, {A: 1.0, B: 1.0, C: 1.0}),  # a continuing session is not moved by spread
        ("http://gone:1", {A: 4, B: 2, C: 0}, {A: 0.0, B: 0.5, C: 1.0}),  # its replica is gone: placed anew
    ],
)
def test_session_spread_scorer(session_replica, sessions, expected) -> None:
    req = PlacementRequest("chat", session_replica=session_replica)
    assert SessionSpreadScorer().score(req, [A, B, C], Snapshot(sessions=sessions)) == expected


# A new session of an application: 400 of its 480 prompt tokens are the application's head, resident on A only.
HEAD_REQ = PlacementRequest("chat", ("h1", "h2"), tie_key="s9", prompt_tokens=480, block_tokens=16)


def head_on_a(sessions: dict[str, int], capacity: dict[str, int]) -> Snapshot:
    return Snapshot(prefix_share={A: 400 / 480, B: 0.0, C: 0.0}, predicted_tokens={A: 400, B: 0, C: 0},
                    precise=frozenset((A, B, C)), sessions=sessions, capacity=capacity)


def test_a_new_session_joins_the_replica_holding_its_head_while_it_has_room() -> None:
    """A holds the head and one session; B and C hold nothing. With room on A (400 + 2 x 4 x 80 = 1,040 of 4,096
    tokens, one session above the fewest), the new session goes to A: its head is not prefilled again elsewhere."""
    snap = head_on_a({A: 1}, {A: 4096, B: 4096, C: 4096})
    assert SessionSpreadScorer().score(HEAD_REQ, [A, B, C], snap) == {A: 1.0, B: 0.0, C: 0.0}
    assert build_profile("prefix_affinity", RouterSettings()).run(HEAD_REQ, [A, B, C], snap).replica == A
    # engines that report no capacity: the session-count imbalance alone decides
    assert build_profile("prefix_affinity", RouterSettings()).run(HEAD_REQ, [A, B, C], head_on_a({A: 1}, {})).replica == A


@pytest.mark.parametrize(
    ("sessions", "capacity", "why"),
    [
        ({}, {A: 700, B: 1000, C: 1000}, "A's cache is full even for one session: 400 + 1 x 4 x 80 > 700"),
        ({A: 1}, {A: 1000, B: 4096, C: 4096}, "A has room for the first session only: 400 + 2 x 4 x 80 > 1,000"),
        ({A: 2}, {A: 8192, B: 8192, C: 8192}, "A has room but is max_excess (2) sessions above the fewest"),
    ],
)
def test_a_new_session_is_spread_when_the_holder_of_its_head_is_full_or_crowded(sessions, capacity, why) -> None:
    snap = head_on_a(sessions, capacity)
    scores = SessionSpreadScorer().score(HEAD_REQ, [A, B, C], snap)
    assert scores[A] == 0.0 and scores[B] == scores[C] == 1.0, why
    assert build_profile("prefix_affinity", RouterSettings()).run(HEAD_REQ, [A, B, C], snap).replica != A, why


def test_grouping_needs_a_head_worth_it_and_can_be_turned_off() -> None:
    """A head under min_share of the prompt is no reason to pile: sessions are spread by their counts."""
    short = Snapshot(prefix_share={A: 0.2}, predicted_tokens={A: 96}, sessions={A: 1}, capacity={A: 4096})
    assert SessionSpreadScorer().score(HEAD_REQ, [A, B, C], short) == {A: 0.0, B: 1.0, C: 1.0}
    off = SessionSpreadScorer(HeadGroupSettings(max_excess=0))
    assert off.score(HEAD_REQ, [A, B, C], head_on_a({A: 1}, {})) == {A: 0.0, B: 1.0, C: 1.0}
    # two holders with room: the one with fewer recent sessions first
    two = Snapshot(prefix_share={A: 0.8, B: 0.8}, predicted_tokens={A: 400, B: 400}, sessions={A: 1, B: 0, C: 0})
    assert SessionSpreadScorer().score(HEAD_REQ, [A, B, C], two) == {A: 0.75, B: 1.0, C: 0.0}


async def test_placed_sessions_are_shared_through_the_store_and_counted_locally_at_once() -> None:
    store = MemoryStore()
    one = SnapshotReader(store, LoadTracker(store, "r1"), prefix_ttl_s=600, spread_window_s=WINDOW_S)
    two = SnapshotReader(store, LoadTracker(store, "r2"), prefix_ttl_s=600, spread_window_s=WINDOW_S)
    req = PlacementRequest("chat", ("h",))
    write = one.count_session(A)
    assert (await one.read(req)).sessions == {A: 1}  # before the store write
    assert (await two.read(req)).sessions == {}
    await write
    await two.count_session(A)
    await two.count_session(B)
    assert (await one.read(req)).sessions == {A: 2, B: 1} == (await two.read(req)).sessions
    assert (await one.read(req, with_load=False)).sessions == {}  # round robin reads nothing of it


async def test_a_routers_own_sessions_count_once_whenever_its_write_lands() -> None:
    """Each router writes its own field of a window's spread hash and takes its own counts from process memory: a
    read whose reply already holds this router's write in flight counts the session once, not twice (twice made a
    head's holder look a session fuller, and the `max_excess` bound sent the head's next session elsewhere)."""
    store = MemoryStore()
    one = SnapshotReader(store, LoadTracker(store, "r1"), prefix_ttl_s=600, spread_window_s=WINDOW_S)
    two = SnapshotReader(store, LoadTracker(store, "r2"), prefix_ttl_s=600, spread_window_s=WINDOW_S)
    req = PlacementRequest("chat", ("h",))
    write = one.count_session(A)
    await write  # landed before the read is answered
    assert (await one.read(req)).sessions == {A: 1}
    rows = await store.hgetall_many(list(spread_keys(now_ms(), WINDOW_S)))
    assert rows[0] == {f"r1|{A}": b"1"}  # this router's own field
    await two.count_session(A)
    assert (await one.read(req)).sessions == {A: 2} == (await two.read(req)).sessions
    # an older router's plain replica field counts as another router's
    await store.hincrby(spread_keys(now_ms(), WINDOW_S)[0], B, 1, 60)
    assert (await one.read(req)).sessions == {A: 2, B: 1}


async def test_a_lost_session_count_write_heals_with_the_load_heartbeat() -> None:
    """The first turns of a burst, on a loaded machine, can miss the store's deadline: the counts are absolute and
    ride on the load publisher, so the other routers see them within a heartbeat."""
    store = MemoryStore()
    tracker = LoadTracker(store, "r1", heartbeat_s=0.05)
    one = SnapshotReader(store, tracker, prefix_ttl_s=600, spread_window_s=WINDOW_S)
    two = SnapshotReader(store, LoadTracker(store, "r2"), prefix_ttl_s=600, spread_window_s=WINDOW_S)
    req = PlacementRequest("chat", ("h",))
    for replica in (A, A, B):
        one.count_session(replica).close()  # every write lost
    assert (await two.read(req)).sessions == {}
    tracker.start()
    try:
        await asyncio.sleep(0.2)
        assert (await two.read(req)).sessions == {A: 2, B: 1} == (await one.read(req)).sessions
    finally:
        await tracker.stop()


async def test_kept_counts_are_renewed_beside_the_traffic_and_never_miss_this_routers_own() -> None:
    """Engine truth read in process (`local_depths`), load and spread from kept rows: a request within `refresh_s`
    takes them as they are, a later one starts one background read (and does not wait for it), rows older than
    `max_age_s` are read inline; this router's own sessions count at once and exactly once."""
    store = MemoryStore()
    counts = SharedCounts(store, refresh_s=0.05, max_age_s=0.5, idle_refresh_s=0)
    one = SnapshotReader(store, LoadTracker(store, "r1"), prefix_ttl_s=600, spread_window_s=WINDOW_S, counts=counts,
                         local_depths=lambda keys: {A: len(keys), B: 0})
    two = SnapshotReader(store, LoadTracker(store, "r2"), prefix_ttl_s=600, spread_window_s=WINDOW_S)
    req = PlacementRequest("chat", ("h",), kv_keys=("k1", "k2"), block_tokens=16, approximate=False)
    first = await one.read(req)
    assert first.prefix == {A: 2, B: 0} and first.precise == {A, B} and first.predicted_tokens[A] == 32
    assert counts.inline_reads == 1 and first.sessions == {}
    await two.count_session(B)
    await one.count_session(A)  # landed after the kept rows were read: counted from this router's own
    assert one.read_at_once(req).sessions == {A: 1}  # two's session is not in the kept rows yet
    assert counts.background_reads == 0
    await asyncio.sleep(0.06)
    assert one.read_at_once(req).sessions == {A: 1}  # old enough to renew: this one starts it, does not wait
    await asyncio.sleep(0.01)
    assert counts.background_reads == 1
    assert one.read_at_once(req).sessions == {A: 1, B: 1}  # renewed: both, each once
    starts = PlacementRequest("chat", ("h",), kv_keys=("k1", "k2"), approximate=False, fresh_counts=True)
    await two.count_session(B)
    assert one.read_at_once(starts) is None  # a session's first turn spreads sessions: it reads the store's counts
    assert (await one.read(starts)).sessions == {A: 1, B: 2} and counts.inline_reads == 2
    assert one.read_at_once(req).sessions == {A: 1, B: 2}  # and the rows it read are kept for the others
    await asyncio.sleep(0.55)  # nothing came: too old to place on, read inline
    assert one.read_at_once(req) is None
    await one.read(req)
    assert counts.inline_reads == 3
    await counts.aclose()


async def test_kept_counts_stay_young_between_requests() -> None:
    """Between requests a slow renewal keeps the rows at most `idle_refresh_s` old: the first request after a
    pause places on them without a store call."""
    store = MemoryStore()
    counts = SharedCounts(store, refresh_s=0.02, max_age_s=0.3, idle_refresh_s=0.1)
    reader = SnapshotReader(store, LoadTracker(store, "r1"), prefix_ttl_s=600, spread_window_s=WINDOW_S, counts=counts,
                            local_depths=lambda keys: {A: 0, B: 0})
    req = PlacementRequest("chat", ("h",), kv_keys=("k1",), approximate=False)
    await reader.read(req)
    await asyncio.sleep(0.6)  # no request for twice max_age_s
    assert reader.read_at_once(req) is not None and counts.inline_reads == 1 and counts.background_reads >= 3
    await counts.aclose()


async def test_engine_truth_in_process_asks_the_store_only_for_claims_while_no_replica_holds_the_head() -> None:
    """The one store call left on the path: another router's claim on a head no engine reported yet (read with the
    counts when those are too old). Once an engine holds the head, or for a session's turn, nothing is read."""
    store = MemoryStore()
    counts = SharedCounts(store, refresh_s=10, max_age_s=10)
    depths = {A: 0, B: 0}
    reader = SnapshotReader(store, LoadTracker(store, "r1"), prefix_ttl_s=600, spread_window_s=WINDOW_S, counts=counts,
                            pending=PendingClaims(store, ttl_s=20, max_blocks=4), head_min_share=0.5,
                            local_depths=lambda keys: dict(depths))
    await PendingClaims(store, ttl_s=20, max_blocks=4).claim(("k1", "k2"), B)  # another router's claim
    req = PlacementRequest("chat", kv_keys=("k1", "k2"), block_tokens=16, approximate=False)
    assert reader.read_at_once(req) is None  # a claim to read
    snap = await reader.read(req)
    assert snap.claimed == {B: 2} and counts.inline_reads == 0 and counts.read_at > float("-inf")
    depths[A] = 2  # an engine reported the head: the truth decides, no claim is read
    snap = reader.read_at_once(req)
    assert snap is not None and snap.claimed == {} and snap.prefix == {A: 2, B: 0}
    depths[A] = 0
    turn = PlacementRequest("chat", kv_keys=("k1", "k2"), session_replica=A, approximate=False)
    snap = reader.read_at_once(turn)
    assert snap is not None and snap.claimed == {}  # a session's turn stays with its replica: claims unread


def test_prefix_home_scorer_is_the_same_everywhere_and_spreads_heads() -> None:
    scorer = PrefixHomeScorer()
    req = PlacementRequest("chat", block_hashes=("head", "next"))
    scores = scorer.score(req, [A, B, C], Snapshot())
    assert sorted(scores.values()) == [0.0, 0.0, 1.0]
    assert scorer.score(req, [C, B, A], Snapshot()) == scores  # candidate order does not matter
    assert scorer.score(REQ, [A, B], Snapshot()) == {A: 0.0, B: 0.0}  # no block: no home
    homes = {max(scorer.score(PlacementRequest("chat", (f"h{i}",)), [A, B, C], Snapshot()).items(),
                 key=lambda kv: kv[1])[0] for i in range(40)}
    assert homes == {A, B, C}


def test_prefix_home_stays_on_until_an_engine_holds_the_head() -> None:
    """A block or two of the specialist's profile prompt cached somewhere (every prompt of that specialist opens
    with it) says nothing about where this prompt's head lives: home still decides. An engine holding the head
    (min_share of the prompt) silences it."""
    scorer = PrefixHomeScorer(min_share=0.5)
    req = PlacementRequest("chat", block_hashes=("head", "next"))
    home = rendezvous("head", sorted([A, B, C]))
    other = next(r for r in (A, B, C) if r != home)
    profile_only = Snapshot(precise=frozenset((A, B, C)), prefix_share={other: 32 / 450})
    assert scorer.score(req, [A, B, C], profile_only) == {r: float(r == home) for r in (A, B, C)}
    holder = Snapshot(precise=frozenset((A, B, C)), prefix_share={other: 0.8})
    assert scorer.score(req, [A, B, C], holder) == {A: 0.0, B: 0.0, C: 0.0}
    # through the profile: the settings' head share reaches the scorer
    profile = build_profile("prefix_affinity", RouterSettings())
    assert profile.run(req, [A, B, C], profile_only).replica == home


async def test_caught_up_adds_what_this_router_did_after_the_snapshot_was_read() -> None:
    """Sessions that start together are decided side by side on snapshots read before any of them was placed:
    each must see the others (their spread counts and head claims), or two applications' first sessions meet on
    one replica."""
    store = MemoryStore()
    pending = PendingClaims(store, ttl_s=30, max_blocks=4)
    tracker = LoadTracker(store, "r1")
    reader = SnapshotReader(store, tracker, prefix_ttl_s=600, spread_window_s=WINDOW_S, pending=pending)
    first = PlacementRequest("chat", ("h",), kv_keys=("k1", "k2"))
    tracker.begin(B)
    read_before = await reader.read(first)
    assert read_before.sessions == {} and read_before.claimed == {} and read_before.load == {B: 1}
    await reader.count_session(A)
    tracker.begin(A)  # the placed session's request is in flight there now
    tracker.end(B)
    write = pending.claim(first.kv_keys, A)
    assert write is not None
    write.close()  # the store write is not needed: the claim is kept here at once
    caught = reader.caught_up(read_before, first)
    assert caught.sessions == {A: 1} and caught.claimed == {A: 2} and caught.load == {A: 1}
    read_after = await reader.read(first)
    assert reader.caught_up(read_after, first).sessions == {A: 1}  # counted once, not twice
    # a continuing session ignores claims; a snapshot of unknown age is left as it is
    stays = PlacementRequest("chat", ("h",), kv_keys=("k1", "k2"), session_replica=B)
    assert reader.caught_up(read_before, stays).claimed == {}
    assert reader.caught_up(Snapshot(), first).sessions == {}


def test_a_heads_claim_counts_behind_a_shared_prefix_claimed_by_another_replica() -> None:
    """Every prompt of a specialist opens with its profile prompt, whose first block was claimed long ago by
    whichever replica served that specialist first (first writer wins). A new head claimed for B behind it: B holds
    the whole claimed head, A only the shared block, and B counts as the head's holder."""
    from macaron.router.kv_index.pending import with_claims

    pending = PendingClaims(MemoryStore(), ttl_s=30, max_blocks=8)
    for keys, replica in ((("profile", "old-head"), A), (("profile", "h1", "h2", "h3"), B)):
        write = pending.claim(keys, replica)
        assert write is not None
        write.close()
    assert pending.merge(("profile", "h1", "h2", "h3"), {}) == {A: 1, B: 4}
    assert pending.merge(("other", "h1"), {}) == {}  # nothing claimed from the first block: no claim at all

    request = PlacementRequest("chat", ("b",), kv_keys=("profile", "h1", "h2", "h3"), block_tokens=16)
    scored = with_claims(Snapshot(claimed={A: 1, B: 4}), request, 0.5)
    assert scored.prefix_share == {A: 0.25, B: 1.0} and scored.predicted_tokens == {A: 16, B: 64}
    assert SessionSpreadScorer().score(request, [A, B, C], scored) == {A: 0.0, B: 1.0, C: 0.0}


def test_own_claims_count_beside_the_stores_reading_of_a_shared_prefix() -> None:
    """The store's reading of a new head often holds only an old claim of the profile prompt's first block (by
    another replica) and stops at the head's first key, which this router's own claim has not written yet. The
    router's own claim of the whole head still counts: the head's next session, placed a moment later, joins it."""
    pending = PendingClaims(MemoryStore(), ttl_s=30, max_blocks=8)
    write = pending.claim(("profile", "h1", "h2", "h3"), B)
    assert write is not None
    write.close()
    assert pending.merge(("profile", "h1", "h2", "h3"), {A: 1}) == {A: 1, B: 4}
    assert pending.merge(("profile", "h1", "h2", "h3"), {A: 1, B: 2}) == {A: 1, B: 4}
    assert pending.merge(("profile", "x1"), {A: 1, C: 2}) == {A: 1, C: 2, B: 1}
    reader = SnapshotReader(MemoryStore(), LoadTracker(MemoryStore(), "r"), prefix_ttl_s=60, pending=pending)
    request = PlacementRequest("chat", ("b",), kv_keys=("profile", "h1", "h2", "h3"), block_tokens=16)
    assert reader.caught_up(Snapshot(claimed={A: 1}, counted_at=1.0), request).claimed == {A: 1, B: 4}


def test_a_prompts_home_is_keyed_past_the_specialists_profile_prompt() -> None:
    """Every prompt of a specialist opens with its profile prompt: two applications' heads behind it get homes of
    their own (independent of each other), while the sessions of one application share theirs."""
    profile = "You are the assistant of the harbour office. " * 12  # 552 characters: two whole blocks and a part

    def head(system: str, user: str) -> str:
        text = f"<|system|>{profile}\n\n{system}<|user|>{user}<|assistant|>"
        return head_block(block_hashes(text, block_chars=256, seed="chat", max_blocks=64), text, profile, 256)

    app_a, app_b = "Billing desk. " * 40, "Shipping desk. " * 40
    assert head(app_a, "first question") == head(app_a, "another question, much later")
    assert head(app_a, "first question") != head(app_b, "first question")
    first = block_hashes(f"<|system|>{profile}", block_chars=256, seed="chat", max_blocks=64)[0]
    assert head(app_a, "q") != first  # not the profile's own first block, which every application shares
    assert head_block([], "text", profile, 256) == ""
    short = block_hashes("tiny prompt " * 30, block_chars=256, seed="chat", max_blocks=64)
    assert head_block(short, "tiny prompt " * 30, profile, 256) == short[0]  # no profile in it: the first block


def test_max_score_picker_breaks_ties_by_load_then_the_same_hash_everywhere() -> None:
    picker = MaxScorePicker()
    assert picker.pick(REQ, {A: 1.0, B: 2.0}, Snapshot()) == B
    assert picker.pick(REQ, {A: 1.0, B: 1.0}, Snapshot(load={A: 3, B: 1})) == B
    tied = picker.pick(REQ, {A: 1.0, B: 1.0, C: 1.0}, Snapshot())
    assert tied == rendezvous("k", [A, B, C]) == MaxScorePicker().pick(REQ, {C: 1.0, A: 1.0, B: 1.0}, Snapshot())
    spread = {picker.pick(PlacementRequest("chat", tie_key=f"s{i}"), {A: 0, B: 0, C: 0}, Snapshot()) for i in range(40)}
    assert spread == {A, B, C}


def test_round_robin_picker_cycles() -> None:
    picker = RoundRobinPicker()
    assert [picker.pick(REQ, {B: 0, A: 0}, Snapshot()) for _ in range(4)] == [A, B, A, B]


@pytest.mark.parametrize(
    ("load", "expected"),
    [
        ({A: 20, B: 2}, B),   # 18 more and 10x: overloaded
        ({A: 9, B: 2}, A),    # 7 more: within the absolute threshold
        ({A: 30, B: 25}, A),  # 5 more
        ({A: 11, B: 0}, B),
    ],
)
def test_balance_guard(load, expected) -> None:
    assert BalanceGuard(abs_threshold=8, rel_threshold=1.5).apply(A, [A, B], Snapshot(load=load)) == expected


def test_healthy_filter_keeps_all_when_all_are_down() -> None:
    f = HealthyFilter()
    assert f.filter(REQ, [A, B], Snapshot(down=frozenset({A}))) == [B]
    assert f.filter(REQ, [A, B], Snapshot(down=frozenset({A, B}))) == [A, B]


def test_profile_weights_and_refusals() -> None:
    profile = PlacementProfile(
        "p", [HealthyFilter()], [WeightedScorer(PrefixScorer(), 3.0), WeightedScorer(LoadScorer(), 1.0)],
        MaxScorePicker(), BalanceGuard(8, 1.5),
    )
    # cache-best wins over a small load difference ...
    snap = Snapshot(load={A: 3, B: 0}, prefix={A: 4}, total_blocks=4)
    placed = profile.run(REQ, [A, B], snap)
    assert placed.replica == A and placed.scores == {A: 3.0, B: 1.0} and not placed.guarded
    # ... but not over an overload
    placed = profile.run(REQ, [A, B], Snapshot(load={A: 12, B: 0}, prefix={A: 4}, total_blocks=4))
    assert placed.replica == B and placed.guarded
    with pytest.raises(ValueError):
        WeightedScorer(LoadScorer(), 0)
    with pytest.raises(NoReplicaError):
        profile.run(REQ, [], Snapshot())


@pytest.mark.parametrize("policy", ["round_robin", "least_load", "prefix_affinity"])
def test_policies_build(policy) -> None:
    profile = build_profile(policy, RouterSettings())
    assert profile.run(REQ, [A, B], Snapshot()).replica in (A, B)
    with pytest.raises(ValueError):
        build_profile("random", RouterSettings())


def test_block_hash_chain() -> None:
    text = "x" * 100 + "y" * 100 + "z" * 50
    h = block_hashes(text, block_chars=100, seed="chat", max_blocks=10)
    assert len(h) == 2  # only full blocks
    assert block_hashes(text + "more", block_chars=100, seed="chat", max_blocks=10) == h
    assert block_hashes(text, block_chars=100, seed="code", max_blocks=10)[0] != h[0]  # per adapter
    assert block_hashes(text, block_chars=100, seed="chat@v2", max_blocks=10)[0] != h[0]  # per version
    other = block_hashes("w" * 100 + "y" * 100, block_chars=100, seed="chat", max_blocks=10)
    assert other[1] != h[1]  # the chain: the same block after another prefix hashes differently
    assert block_hashes(text, block_chars=100, seed="chat", max_blocks=1) == h[:1]


def test_matched_blocks_takes_the_deepest_fresh_block() -> None:
    now = now_ms()
    old = str(now - 700_000).encode()
    fresh = str(now).encode()
    blocks = [{A: fresh, B: fresh}, {A: fresh, B: old}, {A: fresh}, {}]
    assert matched_blocks(blocks, now=now, ttl_s=600) == {A: 3, B: 1}


async def test_index_and_snapshot_round_trip_on_a_store() -> None:
    store = MemoryStore()
    tracker = LoadTracker(store, "r1")
    reader = SnapshotReader(store, tracker, prefix_ttl_s=600)
    index = PrefixIndex(store, ttl_s=600)
    hashes = tuple(block_hashes("a" * 1000, block_chars=100, seed="chat", max_blocks=64))
    req = PlacementRequest("chat", hashes)
    assert (await reader.read(req)).prefix == {}
    assert await index.record(hashes[:6], A) == 6
    snap = await reader.read(req)
    assert snap.prefix == {A: 6} and snap.total_blocks == 10
    assert await index.record(hashes[:6], A, snap.blocks_seen) == 0  # fresh: not rewritten
    # load: another live router's published counts add to this router's live ones
    other = LoadTracker(store, "r2")
    other.begin(A)
    other.begin(B)
    await other.publish()
    tracker.begin(A)
    assert (await reader.read(req)).load == {A: 2, B: 1}
    # a silent router stops counting
    stale = LoadTracker(store, "r3", stale_s=10.0)
    stale.begin(C)
    fields = stale.fields()
    fields["r3|@"] = str(now_ms() - 20_000).encode()
    await store.hset("load", fields, 60)
    assert C not in (await reader.read(req)).load
    assert block_keys(["ab"]) == ["pfx:ab"]


async def test_an_ended_session_counts_out_at_once_where_it_was_counted() -> None:
    """An end signal (EndSession) counts a session out of the router that counted it at once, and its write tells
    the others; a session this router never counted (or counted out already) changes nothing."""
    store = MemoryStore()
    one = SnapshotReader(store, LoadTracker(store, "r1"), prefix_ttl_s=600, spread_window_s=WINDOW_S)
    two = SnapshotReader(store, LoadTracker(store, "r2"), prefix_ttl_s=600, spread_window_s=WINDOW_S)
    req = PlacementRequest("chat", ("h",))
    await one.count_session(A, "ends")
    await one.count_session(A, "talks")
    assert (await two.read(req)).sessions == {A: 2}
    assert two.end_session("ends") is None  # not counted by two
    await one.end_session("ends")
    assert (await two.read(req)).sessions == {A: 1} == (await one.read(req)).sessions
    assert one.end_session("ends") is None  # counted out already
    await one.count_session(A, "ends")  # the same id talks again: a new conversation, counted again
    assert (await two.read(req)).sessions == {A: 2}


async def test_a_session_counts_once_while_it_talks_and_drops_out_after_its_last_turn(monkeypatch) -> None:
    """Spread counts live sessions: each turn renews its session's count, once per window, in the latest window it
    talked in, so the two windows a read sums hold a talking session exactly once however long ago it started, and
    an ended one (no end signal exists) is gone one to two windows after its last turn."""
    from macaron.router.placement import snapshot as snapshot_module

    clock = [600_000_000]
    monkeypatch.setattr(snapshot_module, "now_ms", lambda: clock[0])
    store = MemoryStore()
    one = SnapshotReader(store, LoadTracker(store, "r1"), prefix_ttl_s=600, spread_window_s=60)
    two = SnapshotReader(store, LoadTracker(store, "r2"), prefix_ttl_s=600, spread_window_s=60)
    req = PlacementRequest("chat", ("h",))
    await one.count_session(A, "talks")
    assert one.count_session(A, "talks") is None  # its second turn in the window: counted already, no write
    await one.count_session(A, "ends")
    assert (await one.read(req)).sessions == {A: 2} == (await two.read(req)).sessions
    for _ in range(3):  # "talks" sends a turn in each of the next windows, "ends" sends none
        clock[0] += 60_000
        await one.count_session(A, "talks")
        assert (await two.read(req)).sessions.get(A) == (2 if _ == 0 else 1), _
    assert one.own_sessions(clock[0]) == {A: 1}
    clock[0] += 60_000
    await one.count_session(B, "talks")  # it moved: counted on B alone
    assert (await two.read(req)).sessions == {A: 0, B: 1} and one.own_sessions(clock[0])[A] == 0
    clock[0] += 120_000  # two quiet windows: nothing live
    assert not any((await two.read(req)).sessions.values())


def test_a_sessions_turn_is_not_pulled_to_its_heads_home() -> None:
    """A continuing session whose replica evicted part of its history (no engine holds min_share of the prompt
    now) stays there: home is for prompts no router has placed, and a session's replica is known. Home plus load
    outweighed the session's own weight and moved such turns (and their histories) in a bench run."""
    home = rendezvous("head", sorted([A, B, C]))
    mine = next(r for r in (A, B, C) if r != home)
    turn = PlacementRequest("chat", block_hashes=("head", "h1", "h2", "h3"), session_replica=mine)
    evicted = Snapshot(precise=frozenset((A, B, C)), prefix={mine: 1, home: 1}, total_blocks=4,
                       prefix_share={mine: 0.25, home: 0.25}, load={mine: 3})
    assert PrefixHomeScorer(min_share=0.5).score(turn, [A, B, C], evicted) == {A: 0.0, B: 0.0, C: 0.0}
    profile = build_profile("prefix_affinity", RouterSettings())
    assert profile.run(turn, [A, B, C], evicted).replica == mine
    new = PlacementRequest("chat", block_hashes=("head", "h1", "h2", "h3"))  # no session: home still decides
    assert PrefixHomeScorer(min_share=0.5).score(new, [A, B, C], evicted)[home] == 1.0
