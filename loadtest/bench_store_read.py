"""The router's store calls on its request path, before and after the store changes, in one run.

    python loadtest/bench_store_read.py [--redis redis://127.0.0.1:6379/0] [--rounds 5] [--calls 300]

Two arms of `macaron.store.RedisStore` against the same Redis, interleaved round by round (the order
alternates), so machine load falls on both alike:

- before: every call wrapped in `asyncio.wait_for` (a task of its own per call) and redis-py's
  pure-Python reply parser;
- after: the store as shipped (`asyncio.timeout`, hiredis's C parser where installed).

Calls measured: the placement read of one routed request (`hgetall_many` over the keys
`SnapshotReader.read` asks for a prompt of about 500 tokens: load, two spread windows, the KV epochs,
8 approximate blocks, 31 KV blocks held by one or more of 4 replicas), the rate-limit check (one Lua
script) and the session and version states read (5 small hashes). And, both arms on the shipped
store, a sessionless route's admission and states read for a key with a request rate only (the dev
caller): before, the rate-limit script and the 4 version states as two calls side by side (as the router
sent them); after, one pipeline (`hgetall_many_and_admit`: the states and the admission script). Keys live under a fresh prefix and
are deleted at the end. And, both arms on the shipped store, the placement read with the KV index's depths counted
by the store: before, `hgetall_many_and_depths` (load, spread, approximate blocks, the 31-block chain); after,
`hgetall_many_depths_and_claims`, the same and the head's pending claims (31 claim keys, the first 28 claimed
by one replica: the most a claim read walks). Human-readable lines go to stderr; the last line on stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from typing import Any, Awaitable, Callable, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.connection import _AsyncRESP2Parser
from redis.exceptions import RedisError

from macaron.store import Admission, RedisStore, StoreUnavailableError

T = TypeVar("T")
REPLICAS = [f"http://10.0.0.{i}:30000" for i in range(1, 5)]


class BeforeStore(RedisStore):
    """The store as it was: wait_for around every call, redis-py's Python parser."""

    def __init__(self, url: str, key_prefix: str) -> None:
        super().__init__(url, key_prefix=key_prefix)
        self._redis = aioredis.Redis.from_url(url, socket_timeout=self._timeout_s,
                                              socket_connect_timeout=self._timeout_s, retry_on_timeout=False,
                                              health_check_interval=0, parser_class=_AsyncRESP2Parser)
        self._rate_limit_script = self._redis.register_script(self._rate_limit_script.script)

    async def _call(self, awaitable: Awaitable[T]) -> T:
        try:
            return await asyncio.wait_for(awaitable, self._timeout_s)
        except (RedisError, OSError, asyncio.TimeoutError) as exc:
            raise StoreUnavailableError(f"Redis did not answer: {exc}") from exc


def placement_keys() -> tuple[list[str], list[tuple[str, dict[str, bytes]]]]:
    """The keys of one placement read and the hashes they hold (the shape of a warm 500-token prompt)."""
    head = ["load", "spread:1", "spread:0", "kvepoch"]
    approx = [f"pfx:{uuid.uuid4().hex}" for _ in range(8)]
    kv = [f"kv:{uuid.uuid4().hex}" for _ in range(31)]
    now = str(int(time.time() * 1000)).encode()
    data = [("load", {f"r{i}|{r}": b"1" for i in range(3) for r in REPLICAS} | {f"r{i}|@": now for i in range(3)}),
            ("spread:1", {r: b"2" for r in REPLICAS}), ("kvepoch", {r: b"start-1764770000.123" for r in REPLICAS})]
    data += [(k, {r: now for r in REPLICAS[: 1 + i % 2]}) for i, k in enumerate(approx)]
    data += [(k, {r: b"start-1764770000.123" for r in REPLICAS[: 1 + (i < 8) * 3]}) for i, k in enumerate(kv)]
    return head + approx + kv, data


async def timed(n: int, call: Callable[[], Awaitable[Any]]) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await call()
        out.append((time.perf_counter() - t) * 1000)
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    prefix = f"bench-store-{uuid.uuid4().hex[:8]}:"
    arms = {"before": BeforeStore(args.redis, prefix), "after": RedisStore(args.redis, key_prefix=prefix)}
    keys, data = placement_keys()
    states = ["session:x", "version:chat", "version:agent", "version:code", "version:ui"]
    await arms["after"].hbatch([("set", k, v) for k, v in data], 600)
    versions = states[1:]
    ticket = Admission(rate_key="admit", rate_limit=10**9, window_s=60)  # a key with a request rate only
    shipped = arms["after"]

    async def two_calls(_: RedisStore) -> Any:
        return await asyncio.gather(shipped.rate_limit("limit", 10**9, 60), shipped.hgetall_many(versions))

    async def one_pipeline(_: RedisStore) -> Any:
        return await shipped.hgetall_many_and_admit(versions, ticket)

    hashes, chain = [k for k in keys if not k.startswith("kv:")], [k for k in keys if k.startswith("kv:")]
    claims = [f"kvpend:{k[3:]}" for k in chain]
    await shipped.set_many_nx(claims[:28], REPLICAS[0].encode(), 600)

    async def depths(_: RedisStore) -> Any:
        return await shipped.hgetall_many_and_depths(hashes, "kvepoch", chain)

    async def depths_and_claims(_: RedisStore) -> Any:
        return await shipped.hgetall_many_depths_and_claims(hashes, "kvepoch", chain, claims)

    def per_arm(before: Callable[[RedisStore], Awaitable[Any]], after: Callable[[RedisStore], Awaitable[Any]]
                ) -> Callable[[RedisStore], Awaitable[Any]]:
        return lambda s: before(s) if s is arms["before"] else after(s)

    calls: dict[str, Callable[[RedisStore], Awaitable[Any]]] = {
        "placement read (43 hashes)": lambda s: s.hgetall_many(keys),
        "rate limit (Lua)": lambda s: s.rate_limit("limit", 10**9, 60),
        "session and states (5 hashes)": lambda s: s.hgetall_many(states),
        "limits + states (2 calls -> 1)": per_arm(two_calls, one_pipeline),
        "depths -> depths + claims": per_arm(depths, depths_and_claims),
    }
    times: dict[str, dict[str, list[float]]] = {c: {a: [] for a in arms} for c in calls}
    try:
        for store in arms.values():  # connections and scripts loaded: not measured
            for call in calls.values():
                await timed(20, lambda: call(store))
        for round_ in range(args.rounds):
            order = list(arms) if round_ % 2 == 0 else list(reversed(arms))
            for name, call in calls.items():
                for arm in order:
                    times[name][arm] += await timed(args.calls, lambda: call(arms[arm]))
    finally:
        await arms["after"].delete(*keys, *claims, "limit", "admit")
        for store in arms.values():
            await store.close()
    out: dict[str, Any] = {}
    for name, by_arm in times.items():
        p50 = {a: statistics.median(v) for a, v in by_arm.items()}
        p90 = {a: sorted(v)[int(0.9 * (len(v) - 1))] for a, v in by_arm.items()}
        print(f"{name:<32} before p50 {p50['before']:.3f} ms p90 {p90['before']:.3f}   after p50 {p50['after']:.3f} "
              f"ms p90 {p90['after']:.3f}   after/before p50 {p50['after'] / p50['before']:.2f}", file=sys.stderr)
        out[name] = {"before_p50_ms": round(p50["before"], 4), "after_p50_ms": round(p50["after"], 4),
                     "before_p90_ms": round(p90["before"], 4), "after_p90_ms": round(p90["after"], 4)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0", help="Redis to measure against.")
    parser.add_argument("--rounds", type=int, default=5, help="Interleaved rounds (default 5).")
    parser.add_argument("--calls", type=int, default=300, help="Calls per arm, call kind and round (default 300).")
    args = parser.parse_args(argv)
    from redis.utils import HIREDIS_AVAILABLE

    if not HIREDIS_AVAILABLE:
        print("note: hiredis is not installed: the after arm parses in Python too", file=sys.stderr)
    result = asyncio.run(run(args))
    result["hiredis"] = HIREDIS_AVAILABLE
    result["load_avg_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
