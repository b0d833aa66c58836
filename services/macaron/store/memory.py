"""In-process Store: the embedded stack's default when no REDIS_URL is set.

Semantics match RedisStore (TTL expiry, sliding-window limits); single event loop, so every
operation is atomic without locks.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Callable, Mapping, Sequence

from macaron.store.base import (Admission, AdmitResult, HashOp, RateLimitResult, StoreUnavailableError, chain_depths,
                                 claim_depths)


class MemoryStore:
    """A dict with expiry times; expired keys are dropped lazily and on a size sweep."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, max_keys: int = 200_000) -> None:
        self._clock = clock
        self._max_keys = max_keys
        self._channels: dict[str, set[_MemorySubscription]] = {}
        self._values: dict[str, bytes | dict[str, bytes] | deque[tuple[float, int]]] = {}
        self._expires: dict[str, float] = {}

    def _live(self, key: str) -> object | None:
        expires = self._expires.get(key)
        if expires is not None and expires <= self._clock():
            self._values.pop(key, None)
            self._expires.pop(key, None)
            return None
        return self._values.get(key)

    def _put(self, key: str, value: object, ttl_s: float) -> None:
        if key not in self._values and len(self._values) >= self._max_keys:
            self._sweep()
        self._values[key] = value  # type: ignore[assignment]
        self._expires[key] = self._clock() + ttl_s

    def _sweep(self) -> None:
        now = self._clock()
        for key in [k for k, t in self._expires.items() if t <= now]:
            self._values.pop(key, None)
            self._expires.pop(key, None)
        while len(self._values) >= self._max_keys:  # still full: drop the soonest to expire
            key = min(self._expires, key=self._expires.__getitem__)
            self._values.pop(key, None)
            self._expires.pop(key, None)

    async def get(self, key: str) -> bytes | None:
        value = self._live(key)
        return value if isinstance(value, bytes) else None

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        self._put(key, bytes(value), ttl_s)

    async def delete(self, *keys: str) -> None:
        for key in keys:
            self._values.pop(key, None)
            self._expires.pop(key, None)

    async def expire(self, key: str, ttl_s: float) -> None:
        if self._live(key) is not None:
            self._expires[key] = self._clock() + ttl_s

    async def hset(self, key: str, mapping: Mapping[str, bytes], ttl_s: float) -> None:
        current = self._live(key)
        fields = dict(current) if isinstance(current, dict) else {}
        fields.update({k: bytes(v) for k, v in mapping.items()})
        self._put(key, fields, ttl_s)

    async def hgetall_many(self, keys: Sequence[str]) -> list[dict[str, bytes]]:
        out = []
        for key in keys:
            value = self._live(key)
            out.append(dict(value) if isinstance(value, dict) else {})
        return out

    async def hgetall_many_and_depths(self, keys: Sequence[str], marks_key: str, chain: Sequence[str]
                                      ) -> tuple[list[dict[str, bytes]], dict[str, int]]:
        rows = await self.hgetall_many(keys)
        (marks,) = await self.hgetall_many([marks_key])
        return rows, chain_depths(await self.hgetall_many(chain), marks)

    async def hgetall_many_depths_and_claims(self, keys: Sequence[str], marks_key: str, chain: Sequence[str],
                                             claims: Sequence[str]
                                             ) -> tuple[list[dict[str, bytes]], dict[str, int], dict[str, int]]:
        rows, depths = await self.hgetall_many_and_depths(keys, marks_key, chain)
        return rows, depths, claim_depths([await self.get(k) for k in claims])

    async def set_many_nx(self, keys: Sequence[str], value: bytes, ttl_s: float) -> int:
        written = 0
        for key in keys:
            if self._live(key) is None:
                self._put(key, bytes(value), ttl_s)
                written += 1
        return written

    async def set_nx_get(self, key: str, value: bytes, ttl_s: float) -> bytes | None:
        current = self._live(key)
        if current is not None:
            return bytes(current)  # type: ignore[arg-type]
        self._put(key, bytes(value), ttl_s)
        return None

    async def hbatch(self, ops: Sequence[HashOp], ttl_s: float) -> None:
        for kind, key, what in ops:
            if kind == "set":
                await self.hset(key, what, ttl_s)  # type: ignore[arg-type]
                continue
            current = self._live(key)
            if isinstance(current, dict):
                for name in what:
                    current.pop(name, None)  # type: ignore[call-overload]
                if not current:
                    await self.delete(key)

    async def hincrby(self, key: str, field: str, amount: int, ttl_s: float) -> int:
        current = self._live(key)
        fields = dict(current) if isinstance(current, dict) else {}
        new = int(fields.get(field, b"0")) + amount
        fields[field] = str(new).encode()
        self._put(key, fields, ttl_s)
        return new

    async def rate_limit(self, key: str, limit: int, window_s: float, cost: int = 1) -> RateLimitResult:
        now = self._clock()
        current = self._live(key)
        events: deque[tuple[float, int]] = current if isinstance(current, deque) else deque()
        while events and events[0][0] <= now - window_s:
            events.popleft()
        used = sum(c for _, c in events)
        if used + cost > limit:
            retry = (events[0][0] + window_s - now) if events else window_s
            self._put(key, events, window_s)
            return RateLimitResult(False, max(0, limit - used), max(retry, 0.001))
        events.append((now, cost))
        self._put(key, events, window_s)
        return RateLimitResult(True, limit - used - cost, 0.0)

    async def admit(self, admission: Admission) -> AdmitResult:
        a, now = admission, self._clock()
        events: deque[tuple[float, int]] = deque()
        if a.rate_key:
            current = self._live(a.rate_key)
            events = current if isinstance(current, deque) else deque()
            while events and events[0][0] <= now - a.window_s:
                events.popleft()
            used = sum(c for _, c in events)
            if used + 1 > a.rate_limit:
                retry = (events[0][0] + a.window_s - now) if events else a.window_s
                return AdmitResult(False, "rate", max(retry, 0.001), used, granted=0)
        if a.tokens_key:
            (bucket,) = await self.hgetall_many([a.tokens_key])
            spent = int(bucket.get("used", b"0"))
            if spent >= a.tokens_limit:
                return AdmitResult(False, "tokens", 0.0, spent, granted=0)
        if a.slots_key:
            (slots,) = await self.hgetall_many([a.slots_key])
            in_flight = sum(int(v) for v in slots.values())
            if in_flight + 1 > a.slots_limit:
                return AdmitResult(False, "slots", 0.0, in_flight, granted=0)
            await self.hincrby(a.slots_key, a.slots_field, 1, a.slots_ttl_s)
        if a.rate_key:
            granted = max(1, min(a.rate_credit, a.rate_limit - used))
            events.append((now, granted))
            self._put(a.rate_key, events, a.window_s)
            return AdmitResult(True, used=used + granted, granted=granted)
        return AdmitResult(True)

    async def hgetall_many_and_admit(self, keys: Sequence[str], admission: Admission
                                     ) -> tuple[list[dict[str, bytes]], AdmitResult]:
        return await self.hgetall_many(keys), await self.admit(admission)

    async def publish(self, channel: str, message: bytes) -> int:
        listeners = list(self._channels.get(channel, ()))
        for sub in listeners:
            sub.queue.put_nowait(bytes(message))
        return len(listeners)

    async def subscribe(self, channel: str) -> _MemorySubscription:
        sub = _MemorySubscription(self, channel)
        self._channels.setdefault(channel, set()).add(sub)
        return sub

    def _unsubscribe(self, sub: _MemorySubscription) -> None:
        self._channels.get(sub.channel, set()).discard(sub)

    async def ping(self) -> bool:
        return True

    async def reset(self) -> None:
        """Nothing is pooled in-process."""

    async def close(self) -> None:
        self._values.clear()
        self._expires.clear()
        for subs in self._channels.values():
            for sub in subs:
                sub.closed = True
                sub.queue.put_nowait(None)
        self._channels.clear()


class _MemorySubscription:
    """A queue per subscriber; a closed store breaks it (as a dropped Redis connection does)."""

    def __init__(self, store: MemoryStore, channel: str) -> None:
        self.store, self.channel = store, channel
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.closed = False

    async def next(self, timeout_s: float) -> bytes | None:
        if self.closed and self.queue.empty():
            raise StoreUnavailableError("subscription closed")
        try:
            message = await asyncio.wait_for(self.queue.get(), max(timeout_s, 0.0))
        except asyncio.TimeoutError:
            return None
        if message is None:
            raise StoreUnavailableError("subscription closed")
        return message

    async def close(self) -> None:
        self.closed = True
        self.store._unsubscribe(self)
