"""Redis-backed Store: shared by every router and gateway replica.

Every call has a short deadline (socket timeouts plus an overall asyncio timeout), so a slow
or dead Redis turns into StoreUnavailableError within milliseconds and callers degrade. The
sliding-window limiter runs as one Lua script using Redis' own clock, so replicas whose clocks
disagree still share one limit.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Awaitable, Callable, Mapping, Sequence, TypeVar

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from macaron.store.base import Admission, AdmitResult, HashOp, RateLimitResult, StoreUnavailableError, Subscription

T = TypeVar("T")

_RATE_LIMIT_LUA = """
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window_ms = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local id = ARGV[4]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window_ms)
local used = redis.call('ZCARD', key)
if used + cost > limit then
  local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  local retry = window_ms
  if oldest[2] then retry = tonumber(oldest[2]) + window_ms - now end
  return {0, limit - used, retry}
end
for i = 1, cost do
  redis.call('ZADD', key, now, id .. ':' .. i)
end
redis.call('PEXPIRE', key, window_ms)
return {1, limit - used - cost, 0}
"""


_DEPTHS_AND_CLAIMS_LUA = """
local n_chain = tonumber(ARGV[1])
local marks = redis.call('HGETALL', KEYS[1])
local live, depth, out, n = {}, {}, {}, 0
for i = 1, #marks, 2 do
  live[marks[i]] = marks[i + 1]
  depth[marks[i]] = 0
  n = n + 1
end
for k = 2, 1 + n_chain do
  if n == 0 then break end
  for field, mark in pairs(live) do
    if redis.call('HGET', KEYS[k], field) == mark then
      depth[field] = depth[field] + 1
    else
      live[field] = nil
      n = n - 1
    end
  end
end
for i = 1, #marks, 2 do
  out[#out + 1] = marks[i]
  out[#out + 1] = depth[marks[i]]
end
local first = 2 + n_chain
local deepest, order, claims = {}, {}, {}
for k = first, #KEYS do
  local v = redis.call('GET', KEYS[k])
  if not v then break end
  if deepest[v] == nil then order[#order + 1] = v end
  deepest[v] = k - first + 1
end
for _, owner in ipairs(order) do
  claims[#claims + 1] = owner
  claims[#claims + 1] = deepest[owner]
end
return {out, claims}
"""
"""KEYS[1]: the marks hash; KEYS[2 .. 1 + ARGV[1]]: a chain of hashes; the rest: claim keys. Returns, per name
of the marks hash, how many of the chain, from the first, hold the name with its mark (the KV-cache index's
per-replica prefix depth), and each claim owner's deepest position among the claim keys + 1, up to the first
unclaimed one (see Store.hgetall_many_depths_and_claims)."""


_SET_NX_GET_LUA = """
local held = redis.call('GET', KEYS[1])
if held then return held end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
"""
"""`set_nx_get`: a script rather than SET NX GET, which Redis accepts only from 7.0."""

_ADMIT_LUA = """
local rate_limit = tonumber(ARGV[1])
local window_ms = tonumber(ARGV[2])
local id = ARGV[3]
local tokens_limit = tonumber(ARGV[4])
local slots_limit = tonumber(ARGV[5])
local field = ARGV[6]
local slots_ttl_ms = tonumber(ARGV[7])
local now, used = 0, 0
if rate_limit >= 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window_ms)
  used = redis.call('ZCARD', KEYS[1])
  if used + 1 > rate_limit then
    local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    local retry = window_ms
    if oldest[2] then retry = tonumber(oldest[2]) + window_ms - now end
    return {0, 'rate', retry, used, 0}
  end
end
if tokens_limit >= 0 then
  local spent = tonumber(redis.call('HGET', KEYS[2], 'used') or '0')
  if spent >= tokens_limit then return {0, 'tokens', 0, spent, 0} end
end
if slots_limit >= 0 then
  local n = 0
  for _, v in ipairs(redis.call('HVALS', KEYS[3])) do n = n + tonumber(v) end
  if n + 1 > slots_limit then return {0, 'slots', 0, n, 0} end
  redis.call('HINCRBY', KEYS[3], field, 1)
  redis.call('PEXPIRE', KEYS[3], slots_ttl_ms)
end
local granted = 1
if rate_limit >= 0 then
  granted = math.max(1, math.min(tonumber(ARGV[8]), rate_limit - used))
  for i = 1, granted do redis.call('ZADD', KEYS[1], now, id .. ':' .. i) end
  redis.call('PEXPIRE', KEYS[1], window_ms)
end
return {1, '', 0, used + granted, granted}
"""
"""KEYS: the rate window, the token budget, the slots (unused ones repeat KEYS[1], untouched); ARGV: rate limit,
window ms, a unique member, token limit, slot limit (-1: no such limit), this replica's slot field, slot TTL ms,
rate admissions to take at once (the rate credit; fewer near the limit). Every limit is checked before anything is
written (Store.admit)."""


def _admit_args(prefixed: Callable[[str], str], admission: Admission) -> tuple[list[str], list[Any]]:
    a = admission
    keys = [prefixed(k) if k else "" for k in (a.rate_key, a.tokens_key, a.slots_key)]
    first = next((k for k in keys if k), "")
    keys = [k or first for k in keys]
    args = [a.rate_limit if a.rate_key else -1, _ms(a.window_s), uuid.uuid4().hex,
            a.tokens_limit if a.tokens_key else -1, a.slots_limit if a.slots_key else -1, a.slots_field,
            _ms(a.slots_ttl_s), max(1, a.rate_credit)]
    return keys, args


def _admit_result(reply: Sequence[Any]) -> AdmitResult:
    allowed, refused, retry_ms, used, granted = reply
    refused = refused.decode() if isinstance(refused, bytes) else str(refused)
    return AdmitResult(bool(allowed), refused, max(0.0, int(retry_ms) / 1000.0), int(used),  # type: ignore[arg-type]
                       int(granted))


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


class _RedisSubscription:
    """One channel on a connection of its own (a subscribed connection takes no other command)."""

    def __init__(self, pubsub: Any) -> None:
        self._pubsub = pubsub

    async def next(self, timeout_s: float) -> bytes | None:
        try:
            # the wait is the call's own timeout, not the store's short socket deadline
            message = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=max(timeout_s, 0.0))
        except (RedisError, OSError, asyncio.TimeoutError) as exc:
            raise StoreUnavailableError(f"subscription broken: {exc.__class__.__name__}: {exc}") from exc
        if message is None or message.get("type") != "message":
            return None
        data = message["data"]
        return data if isinstance(data, bytes) else str(data).encode()

    async def close(self) -> None:
        try:
            await self._pubsub.aclose()
        except (RedisError, OSError, RuntimeError):
            pass


class RedisStore:
    """Store on a Redis server; `timeout_s` bounds every operation."""

    def __init__(self, url: str, timeout_s: float = 0.25, key_prefix: str = "macaron:",
                 client_name: str | None = None) -> None:
        """`client_name`: the name its connections show in Redis' CLIENT LIST (operators, tests)."""
        self._prefix = key_prefix
        self._timeout_s = timeout_s
        self._redis = aioredis.Redis.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry_on_timeout=False,
            health_check_interval=0,
            client_name=client_name,
        )
        self._rate_limit_script = self._redis.register_script(_RATE_LIMIT_LUA)
        self._admit_script = self._redis.register_script(_ADMIT_LUA)
        self._set_nx_get_script = self._redis.register_script(_SET_NX_GET_LUA)

    def _k(self, key: str) -> str:
        return self._prefix + key

    async def _call(self, awaitable: Awaitable[T]) -> T:
        # asyncio.timeout, not wait_for: wait_for (Python 3.11) runs the call in a task of its own, one more
        # task and loop turn per store call on the request's path
        try:
            async with asyncio.timeout(self._timeout_s):
                return await awaitable
        except (RedisError, OSError, asyncio.TimeoutError) as exc:
            raise StoreUnavailableError(f"Redis did not answer: {exc.__class__.__name__}: {exc}") from exc

    async def get(self, key: str) -> bytes | None:
        return await self._call(self._redis.get(self._k(key)))

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        await self._call(self._redis.set(self._k(key), value, px=_ms(ttl_s)))

    async def delete(self, *keys: str) -> None:
        if keys:
            await self._call(self._redis.delete(*(self._k(k) for k in keys)))

    async def expire(self, key: str, ttl_s: float) -> None:
        await self._call(self._redis.pexpire(self._k(key), _ms(ttl_s)))

    async def hset(self, key: str, mapping: Mapping[str, bytes], ttl_s: float) -> None:
        async def run() -> Any:
            pipe = self._redis.pipeline(transaction=True)
            pipe.hset(self._k(key), mapping=dict(mapping))
            pipe.pexpire(self._k(key), _ms(ttl_s))
            return await pipe.execute()

        await self._call(run())

    async def hgetall_many(self, keys: Sequence[str]) -> list[dict[str, bytes]]:
        if not keys:
            return []

        async def run() -> list[dict[bytes, bytes]]:
            pipe = self._redis.pipeline(transaction=False)
            for key in keys:
                pipe.hgetall(self._k(key))
            return await pipe.execute()

        results = await self._call(run())
        return [{k.decode(): v for k, v in r.items()} for r in results]

    async def hgetall_many_and_depths(self, keys: Sequence[str], marks_key: str, chain: Sequence[str]
                                      ) -> tuple[list[dict[str, bytes]], dict[str, int]]:
        rows, depths, _ = await self.hgetall_many_depths_and_claims(keys, marks_key, chain, ())
        return rows, depths

    async def hgetall_many_depths_and_claims(self, keys: Sequence[str], marks_key: str, chain: Sequence[str],
                                             claims: Sequence[str]
                                             ) -> tuple[list[dict[str, bytes]], dict[str, int], dict[str, int]]:
        async def run() -> list[Any]:
            pipe = self._redis.pipeline(transaction=False)
            for key in keys:
                pipe.hgetall(self._k(key))
            # EVAL, not EVALSHA: a pipeline cannot retry on NOSCRIPT; the server keeps the compiled script by hash
            pipe.eval(_DEPTHS_AND_CLAIMS_LUA, 1 + len(chain) + len(claims), self._k(marks_key),
                      *(self._k(k) for k in chain), *(self._k(k) for k in claims), len(chain))
            return await pipe.execute()

        results = await self._call(run())
        rows = [{k.decode(): v for k, v in r.items()} for r in results[:-1]]
        flat, claimed = results[-1]
        depths = {flat[i].decode(): int(flat[i + 1]) for i in range(0, len(flat), 2)}
        return rows, depths, {claimed[i].decode(): int(claimed[i + 1]) for i in range(0, len(claimed), 2)}

    async def set_many_nx(self, keys: Sequence[str], value: bytes, ttl_s: float) -> int:
        if not keys:
            return 0

        async def run() -> list[Any]:
            pipe = self._redis.pipeline(transaction=False)
            for key in keys:
                pipe.set(self._k(key), value, px=_ms(ttl_s), nx=True)
            return await pipe.execute()

        return sum(1 for ok in await self._call(run()) if ok)

    async def set_nx_get(self, key: str, value: bytes, ttl_s: float) -> bytes | None:
        held = await self._call(self._set_nx_get_script(keys=[self._k(key)], args=[value, _ms(ttl_s)]))
        return bytes(held) if held else None

    async def hbatch(self, ops: Sequence[HashOp], ttl_s: float) -> None:
        if not ops:
            return

        async def run() -> Any:
            pipe = self._redis.pipeline(transaction=False)
            for kind, key, what in ops:
                if kind == "set":
                    pipe.hset(self._k(key), mapping=dict(what))  # type: ignore[arg-type]
                    pipe.pexpire(self._k(key), _ms(ttl_s))
                elif what:
                    pipe.hdel(self._k(key), *what)
            return await pipe.execute()

        await self._call(run())

    async def hincrby(self, key: str, field: str, amount: int, ttl_s: float) -> int:
        async def run() -> list[Any]:
            pipe = self._redis.pipeline(transaction=True)
            pipe.hincrby(self._k(key), field, amount)
            pipe.pexpire(self._k(key), _ms(ttl_s))
            return await pipe.execute()

        return int((await self._call(run()))[0])

    async def rate_limit(self, key: str, limit: int, window_s: float, cost: int = 1) -> RateLimitResult:
        allowed, remaining, retry_ms = await self._call(
            self._rate_limit_script(keys=[self._k(key)], args=[limit, _ms(window_s), cost, uuid.uuid4().hex])
        )
        return RateLimitResult(bool(allowed), max(0, int(remaining)), max(0.0, int(retry_ms) / 1000.0))

    async def admit(self, admission: Admission) -> AdmitResult:
        if not admission.checks:
            return AdmitResult(True)
        keys, args = _admit_args(self._k, admission)
        return _admit_result(await self._call(self._admit_script(keys=keys, args=args)))

    async def hgetall_many_and_admit(self, keys: Sequence[str], admission: Admission
                                     ) -> tuple[list[dict[str, bytes]], AdmitResult]:
        if not admission.checks:
            return await self.hgetall_many(keys), AdmitResult(True)
        script_keys, args = _admit_args(self._k, admission)

        async def run() -> list[Any]:
            pipe = self._redis.pipeline(transaction=False)
            for key in keys:
                pipe.hgetall(self._k(key))
            # EVAL, not EVALSHA: a pipeline cannot retry on NOSCRIPT; the server keeps the compiled script by hash
            pipe.eval(_ADMIT_LUA, 3, *script_keys, *args)
            return await pipe.execute()

        results = await self._call(run())
        return [{k.decode(): v for k, v in r.items()} for r in results[:-1]], _admit_result(results[-1])

    async def publish(self, channel: str, message: bytes) -> int:
        return int(await self._call(self._redis.publish(self._k(channel), message)))

    async def subscribe(self, channel: str) -> Subscription:
        pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        try:
            await self._call(pubsub.subscribe(self._k(channel)))
        except StoreUnavailableError:
            await pubsub.aclose()
            raise
        return _RedisSubscription(pubsub)

    async def ping(self) -> bool:
        try:
            return bool(await self._call(self._redis.ping()))
        except StoreUnavailableError:
            return False

    async def reset(self) -> None:
        # idle connections only: closing one another call is using under it (the breaker resets the pool at the
        # first timeout, while others may still be reading) fails that call with a bare RuntimeError (uvloop's
        # "the handler is closed"), not a store error, and its request with UNKNOWN; a broken in-use connection
        # is dropped by its own call's error
        await self._redis.connection_pool.disconnect(inuse_connections=False)

    async def close(self) -> None:
        await self._redis.aclose()
