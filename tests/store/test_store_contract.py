"""One contract, two stores: the in-process store behaves as the Redis store does."""

from __future__ import annotations

import asyncio
import uuid
from typing import AsyncIterator

import pytest

from macaron.store import Admission, MemoryStore, RedisStore, Store, StoreUnavailableError


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    if request.param == "memory":
        s: Store = MemoryStore()
    else:
        url = request.getfixturevalue("redis_url")
        s = RedisStore(url, timeout_s=2.0, key_prefix=f"test:{uuid.uuid4().hex}:")
    yield s
    await s.close()


async def test_get_set_delete_and_ttl(store: Store) -> None:
    assert await store.get("a") is None
    await store.set("a", b"1", ttl_s=0.2)
    assert await store.get("a") == b"1"
    await store.delete("a")
    assert await store.get("a") is None
    await store.set("b", b"2", ttl_s=0.15)
    await asyncio.sleep(0.25)
    assert await store.get("b") is None


async def test_expire_slides_the_ttl(store: Store) -> None:
    await store.set("s", b"x", ttl_s=0.3)
    await asyncio.sleep(0.2)
    await store.expire("s", 0.3)
    await asyncio.sleep(0.2)
    assert await store.get("s") == b"x"
    await store.expire("missing", 1.0)
    assert await store.get("missing") is None


async def test_hashes_merge_and_read_in_one_call(store: Store) -> None:
    await store.hset("h1", {"r1": b"10"}, ttl_s=5)
    await store.hset("h1", {"r2": b"20"}, ttl_s=5)
    await store.hset("h2", {"r3": b"30"}, ttl_s=5)
    got = await store.hgetall_many(["h1", "nope", "h2"])
    assert got == [{"r1": b"10", "r2": b"20"}, {}, {"r3": b"30"}]
    assert await store.hgetall_many([]) == []


async def test_chain_depths_are_counted_in_the_same_call_as_the_hashes(store: Store) -> None:
    """Per field of the marks hash: how many chain hashes, from the first, hold it with its mark (a stale mark, a
    gap or a missing hash ends the count; a field absent from the marks is not counted at all)."""
    await store.hset("marks", {"r1": b"e1", "r2": b"e2", "r3": b"e3"}, ttl_s=30)
    await store.hset("c0", {"r1": b"e1", "r2": b"e2", "r4": b"e4"}, ttl_s=30)
    await store.hset("c1", {"r1": b"e1", "r2": b"old"}, ttl_s=30)
    await store.hset("c2", {"r1": b"e1", "r2": b"e2"}, ttl_s=30)
    await store.hset("c4", {"r1": b"e1"}, ttl_s=30)  # c3 missing: r1 stops at 3
    await store.hset("other", {"x": b"1"}, ttl_s=30)
    rows, depths = await store.hgetall_many_and_depths(["other", "nope"], "marks", ["c0", "c1", "c2", "c3", "c4"])
    assert rows == [{"x": b"1"}, {}]
    assert depths == {"r1": 3, "r2": 1, "r3": 0}
    assert (await store.hgetall_many_and_depths([], "no-marks", ["c0"])) == ([], {})
    assert (await store.hgetall_many_and_depths(["other"], "marks", []))[1] == {"r1": 0, "r2": 0, "r3": 0}


async def test_depths_and_claims_are_read_in_one_call(store: Store) -> None:
    """The chain depths as above, and the claims: each owner's deepest claim (+ 1) up to the first missing key (a
    claim of block k was made for a prompt of blocks 0..k, whoever claimed the earlier ones first); an unclaimed
    first key: no owner."""
    await store.hset("marks", {"r1": b"e1", "r2": b"e2"}, ttl_s=30)
    await store.hset("c0", {"r1": b"e1", "r2": b"e2"}, ttl_s=30)
    await store.hset("c1", {"r1": b"e1"}, ttl_s=30)
    await store.hset("other", {"x": b"1"}, ttl_s=30)
    assert await store.set_many_nx(["p0", "p1", "p2"], b"r3", ttl_s=30) == 3
    assert await store.set_many_nx(["p2", "p3"], b"r4", ttl_s=30) == 1  # first writer wins: p2 stays r3's
    await store.set_many_nx(["p5"], b"r3", ttl_s=30)
    rows, depths, claims = await store.hgetall_many_depths_and_claims(
        ["other", "nope"], "marks", ["c0", "c1", "c2"], ["p0", "p1", "p2", "p3", "p4", "p5"])
    assert rows == [{"x": b"1"}, {}]
    assert depths == {"r1": 2, "r2": 1}
    assert claims == {"r3": 3, "r4": 4}  # p4 is missing: p5's claim is not counted
    assert (await store.hgetall_many_depths_and_claims([], "marks", ["c0"], ["p3", "p2"]))[1:] == ({"r1": 1, "r2": 1},
                                                                                                   {"r4": 1, "r3": 2})
    assert (await store.hgetall_many_depths_and_claims([], "no-marks", [], ["p4", "p0"])) == ([], {}, {})
    assert (await store.hgetall_many_depths_and_claims(["other"], "no-marks", ["c0"], [])) == ([{"x": b"1"}], {}, {})


async def test_set_nx_get_sets_once_and_tells_who_holds_the_key(store: Store) -> None:
    """A replica's landing: the first new head placed there takes it, a second one learns whose it is."""
    assert await store.set_nx_get("land:r1", b"head-a", ttl_s=0.3) is None
    assert await store.set_nx_get("land:r1", b"head-b", ttl_s=5) == b"head-a"
    assert await store.set_nx_get("land:r1", b"head-a", ttl_s=5) == b"head-a"  # the holder itself
    await asyncio.sleep(0.4)
    assert await store.set_nx_get("land:r1", b"head-b", ttl_s=5) is None  # expired: free again


async def test_claims_expire(store: Store) -> None:
    assert await store.set_many_nx(["q0", "q1"], b"r1", ttl_s=0.2) == 2
    assert await store.set_many_nx(["q0"], b"r2", ttl_s=5) == 0
    await asyncio.sleep(0.3)
    assert (await store.hgetall_many_depths_and_claims([], "marks", [], ["q0", "q1"]))[2] == {}
    assert await store.set_many_nx(["q0"], b"r2", ttl_s=5) == 1
    assert await store.set_many_nx([], b"r2", ttl_s=5) == 0


async def test_hbatch_applies_sets_and_deletes_in_order(store: Store) -> None:
    await store.hbatch([("set", "h", {"a": b"1", "b": b"2"}), ("del", "h", ["a"]), ("set", "g", {"x": b"9"}),
                        ("del", "g", ["x"]), ("set", "g", {"y": b"8"}), ("del", "missing", ["z"])], ttl_s=0.3)
    assert await store.hgetall_many(["h", "g", "missing"]) == [{"b": b"2"}, {"y": b"8"}, {}]
    await asyncio.sleep(0.4)
    assert await store.hgetall_many(["h", "g"]) == [{}, {}]


async def test_hincrby_counts_and_expires(store: Store) -> None:
    assert await store.hincrby("load", "replica-a", 1, ttl_s=5) == 1
    assert await store.hincrby("load", "replica-a", 2, ttl_s=5) == 3
    assert await store.hincrby("load", "replica-a", -3, ttl_s=5) == 0
    assert (await store.hgetall_many(["load"]))[0]["replica-a"] == b"0"
    await store.hincrby("short", "x", 1, ttl_s=0.1)
    await asyncio.sleep(0.2)
    assert await store.hgetall_many(["short"]) == [{}]


async def test_rate_limit_sliding_window(store: Store) -> None:
    results = [await store.rate_limit("key", limit=3, window_s=0.5) for _ in range(4)]
    assert [r.allowed for r in results] == [True, True, True, False]
    assert results[0].remaining == 2 and results[2].remaining == 0
    assert 0 < results[3].retry_after_s <= 0.5
    await asyncio.sleep(0.55)
    assert (await store.rate_limit("key", limit=3, window_s=0.5)).allowed
    big = await store.rate_limit("cost", limit=3, window_s=1, cost=4)
    assert not big.allowed


async def test_admit_takes_every_limit_or_none(store: Store) -> None:
    """One call checks the request rate, the token budget and a concurrency slot; a refusal writes nothing: it
    counts against no window and takes no slot."""
    ticket = Admission(rate_key="rate", rate_limit=3, window_s=30, tokens_key="tokens", tokens_limit=100,
                       slots_key="slots", slots_field="r1", slots_limit=2, slots_ttl_s=30)
    first, second, third = [await store.admit(ticket) for _ in range(3)]
    assert first.allowed and second.allowed
    assert (third.allowed, third.refused, third.used) == (False, "slots", 2)
    assert await store.hgetall_many(["slots"]) == [{"r1": b"2"}]
    await store.hincrby("slots", "r1", -1, ttl_s=30)  # one request ends
    assert (await store.admit(ticket)).allowed  # the refused one did not count against the rate: 3 of 3
    refused = await store.admit(ticket)
    assert (refused.allowed, refused.refused) == (False, "rate")
    assert 0 < refused.retry_after_s <= 30
    assert await store.hgetall_many(["slots"]) == [{"r1": b"2"}]  # refused by the rate: no slot taken
    await store.hset("tokens", {"used": b"100"}, ttl_s=30)
    spent = await store.admit(Admission(tokens_key="tokens", tokens_limit=100))
    assert (spent.allowed, spent.refused, spent.used) == (False, "tokens", 100)
    assert (await store.admit(Admission())).allowed  # nothing to check


async def test_a_read_carries_an_admission_in_the_same_call(store: Store) -> None:
    await store.hset("state", {"v": b"1"}, ttl_s=30)
    ticket = Admission(rate_key="r", rate_limit=1, window_s=30, slots_key="s", slots_field="me", slots_limit=5)
    rows, verdict = await store.hgetall_many_and_admit(["state", "nope"], ticket)
    assert rows == [{"v": b"1"}, {}] and verdict.allowed
    rows, verdict = await store.hgetall_many_and_admit(["state"], ticket)
    assert rows == [{"v": b"1"}] and verdict.refused == "rate"
    assert await store.hgetall_many(["s"]) == [{"me": b"1"}]


async def test_ping(store: Store) -> None:
    assert await store.ping()


async def test_dead_redis_fails_fast_with_a_clear_error() -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = RedisStore(f"redis://127.0.0.1:{port}/0", timeout_s=0.2)
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(StoreUnavailableError, match="Redis did not answer"):
        await store.get("x")
    assert not await store.ping()
    assert loop.time() - start < 2.0
    await store.close()


async def test_reset_drops_pooled_connections_and_keeps_working(store: Store) -> None:
    await store.set("r", b"1", ttl_s=5)
    await store.reset()
    assert await store.get("r") == b"1"


async def test_admit_takes_a_rate_credit_at_once_and_less_near_the_limit(store: Store) -> None:
    """A rate-only admission may take several admissions of the window at once (a router's rate credit): all that
    fit, at least one, never past the limit."""
    ticket = Admission(rate_key="credit", rate_limit=10, window_s=30, rate_credit=4)
    first = await store.admit(ticket)
    assert (first.allowed, first.granted, first.used) == (True, 4, 4)
    second = await store.admit(ticket)
    assert (second.granted, second.used) == (4, 8)
    third = await store.admit(ticket)  # two left in the window: two granted
    assert (third.allowed, third.granted, third.used) == (True, 2, 10)
    refused = await store.admit(ticket)
    assert (refused.allowed, refused.refused, refused.granted) == (False, "rate", 0)
    single = await store.admit(Admission(rate_key="single", rate_limit=10, window_s=30))
    assert (single.granted, single.used) == (1, 1)


async def test_publish_reaches_every_subscriber_and_none_after_close(store: Store) -> None:
    one, two = await store.subscribe("chan"), await store.subscribe("chan")
    other = await store.subscribe("other")
    assert await store.publish("chan", b"hello") == 2

    async def message(sub) -> bytes | None:  # a subscription may wake without a message (None): wait on
        for _ in range(50):
            got = await sub.next(0.2)
            if got is not None:
                return got
        return None

    assert await message(one) == b"hello" and await message(two) == b"hello"
    assert await other.next(0.05) is None
    await one.close()
    assert await store.publish("chan", b"again") == 1
    assert await message(two) == b"again"
    await two.close()
    await other.close()
