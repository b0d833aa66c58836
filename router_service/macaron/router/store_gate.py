"""The shared store behind a breaker: a dead Redis costs one short deadline, then nothing.

`GatedStore` implements `macaron.store.Store` around another store. The first failure marks it
degraded; while degraded every call raises StoreUnavailableError at once (no deadline paid per
request) and a background probe pings every `retry_s` until Redis answers, then state is shared
again. Sessions, affinity, load and the auth guard's limits all go through one gate, so the
router reports one `degraded` flag in health and metrics.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable, Mapping, Sequence, TypeVar

from macaron.store import Admission, AdmitResult, RateLimitResult, Store, StoreUnavailableError, Subscription
from macaron.store.base import HashOp

log = logging.getLogger(__name__)
T = TypeVar("T")


class GatedStore:
    """A Store that stops calling a dead backend until a probe sees it answer again."""

    def __init__(self, store: Store, *, retry_s: float = 1.0,
                 on_change: Callable[[bool], None] | None = None,
                 on_error: Callable[[], None] | None = None) -> None:
        self.store = store
        self.retry_s = retry_s
        self.degraded = False
        self.errors = 0
        self._on_change = on_change
        self._on_error = on_error
        self._probe: asyncio.Task[None] | None = None
        self._since = 0.0
        self._closed = False

    def mark_unavailable(self, why: str) -> None:
        """Degrades now (e.g. no answer at start-up) and probes until the store answers."""
        self._set(True, why)
        self._start_probe()

    def _set(self, degraded: bool, why: str = "") -> None:
        if degraded == self.degraded:
            return
        self.degraded = degraded
        if degraded:
            self._since = time.monotonic()
            log.warning("shared store unavailable (%s): routing without sessions and affinity", why)
        else:
            log.info("shared store is back after %.1f s: sessions and affinity are shared again",
                     time.monotonic() - self._since)
        if self._on_change is not None:
            self._on_change(degraded)

    async def _call(self, make: Callable[[], Awaitable[T]]) -> T:
        if self.degraded:
            raise StoreUnavailableError("shared store marked unavailable; skipped")
        try:
            return await make()
        except StoreUnavailableError as exc:
            self.errors += 1
            if self._on_error is not None:
                self._on_error()
            if not self.degraded:
                self._set(True, str(exc))
                await self._reset_connections()
            self._start_probe()
            raise

    async def _reset_connections(self) -> None:
        """Drops pooled connections to the dead server, so none of them fails once more after it is back."""
        try:
            await self.store.reset()
        except Exception:  # noqa: BLE001 - resetting a dead pool must not mask the outage
            pass

    def _start_probe(self) -> None:
        if self._probe is None or self._probe.done():
            self._probe = asyncio.get_running_loop().create_task(self._probe_loop())

    async def _probe_loop(self) -> None:
        while self.degraded and not self._closed:
            await asyncio.sleep(self.retry_s)
            try:
                if await self.store.ping():
                    self._set(False)
            except Exception:  # noqa: BLE001 - a probe never raises
                pass

    # ------------------------------------------------------------ Store

    async def get(self, key: str) -> bytes | None:
        return await self._call(lambda: self.store.get(key))

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        await self._call(lambda: self.store.set(key, value, ttl_s))

    async def delete(self, *keys: str) -> None:
        await self._call(lambda: self.store.delete(*keys))

    async def expire(self, key: str, ttl_s: float) -> None:
        await self._call(lambda: self.store.expire(key, ttl_s))

    async def hset(self, key: str, mapping: Mapping[str, bytes], ttl_s: float) -> None:
        await self._call(lambda: self.store.hset(key, mapping, ttl_s))

    async def hgetall_many(self, keys: Sequence[str]) -> list[dict[str, bytes]]:
        return await self._call(lambda: self.store.hgetall_many(keys))

    async def hgetall_many_and_depths(self, keys: Sequence[str], marks_key: str, chain: Sequence[str]
                                      ) -> tuple[list[dict[str, bytes]], dict[str, int]]:
        return await self._call(lambda: self.store.hgetall_many_and_depths(keys, marks_key, chain))

    async def hgetall_many_depths_and_claims(self, keys: Sequence[str], marks_key: str, chain: Sequence[str],
                                             claims: Sequence[str]
                                             ) -> tuple[list[dict[str, bytes]], dict[str, int], dict[str, int]]:
        return await self._call(lambda: self.store.hgetall_many_depths_and_claims(keys, marks_key, chain, claims))

    async def set_many_nx(self, keys: Sequence[str], value: bytes, ttl_s: float) -> int:
        return await self._call(lambda: self.store.set_many_nx(keys, value, ttl_s))

    async def set_nx_get(self, key: str, value: bytes, ttl_s: float) -> bytes | None:
        return await self._call(lambda: self.store.set_nx_get(key, value, ttl_s))

    async def hbatch(self, ops: Sequence[HashOp], ttl_s: float) -> None:
        await self._call(lambda: self.store.hbatch(ops, ttl_s))

    async def hincrby(self, key: str, field: str, amount: int, ttl_s: float) -> int:
        return await self._call(lambda: self.store.hincrby(key, field, amount, ttl_s))

    async def rate_limit(self, key: str, limit: int, window_s: float, cost: int = 1) -> RateLimitResult:
        return await self._call(lambda: self.store.rate_limit(key, limit, window_s, cost))

    async def admit(self, admission: Admission) -> AdmitResult:
        return await self._call(lambda: self.store.admit(admission))

    async def hgetall_many_and_admit(self, keys: Sequence[str], admission: Admission
                                     ) -> tuple[list[dict[str, bytes]], AdmitResult]:
        return await self._call(lambda: self.store.hgetall_many_and_admit(keys, admission))

    async def publish(self, channel: str, message: bytes) -> int:
        return await self._call(lambda: self.store.publish(channel, message))

    async def subscribe(self, channel: str) -> Subscription:
        return await self._call(lambda: self.store.subscribe(channel))

    async def ping(self) -> bool:
        try:
            ok = await self.store.ping()
        except Exception:  # noqa: BLE001
            ok = False
        if ok:
            self._set(False)
        return ok

    async def reset(self) -> None:
        await self._reset_connections()

    async def close(self) -> None:
        self._closed = True
        if self._probe is not None:
            self._probe.cancel()
            await asyncio.wait({self._probe}, timeout=1.0)
        await self.store.close()
