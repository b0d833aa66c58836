"""Which versions this router is using now: requests in flight and last use, shared through the store.

`unload` must wait until no request uses a version any more, on any router. Each router counts
its own requests per (specialist, version) and republishes them every `heartbeat_s` (and soon
after a version starts or stops being used), one field per router and version in
`lifecycle:usage:<specialist>`; a router silent for longer than the stale time no longer counts
(VersionStore.usage).

A change is published `coalesce_s` after it happens, every specialist in one store round trip:
the write that a request's start triggers then lands after that request went on to its
specialist, not between its routing decision and its first token (on a busy core, four
sequential writes there cost the request milliseconds). Unload tolerates the delay: it waits
1.5 heartbeats after taking a version out of the states before it trusts the usage.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict

from macaron.lifecycle.store import STATE_TTL_S, usage_key
from macaron.lifecycle.tasks import stop_task
from macaron.store import Store, StoreUnavailableError
from macaron.store.base import HashOp

log = logging.getLogger(__name__)
USAGE_TTL_S = 3600.0


class UsageTracker:
    """In-flight requests per (specialist, version) on this router."""

    def __init__(self, store: Store, router_id: str, *, heartbeat_s: float = 1.0, coalesce_s: float = 0.0) -> None:
        if coalesce_s >= heartbeat_s:
            raise ValueError(f"coalesce_s ({coalesce_s}) must be shorter than heartbeat_s ({heartbeat_s})")
        self.store = store
        self.router_id = router_id
        self.heartbeat_s = heartbeat_s
        self.coalesce_s = coalesce_s
        """Changes within this window go out in one write, after the request that made them left the router."""
        self.in_flight: dict[tuple[str, str], int] = defaultdict(int)
        self.last_used: dict[tuple[str, str], float] = {}
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    def begin(self, specialist: str, version: str) -> None:
        key = (specialist, version)
        self.in_flight[key] += 1
        self.last_used[key] = time.time()
        if self.in_flight[key] == 1:
            self._wake.set()

    def end(self, specialist: str, version: str) -> None:
        key = (specialist, version)
        self.in_flight[key] = max(0, self.in_flight[key] - 1)
        self.last_used[key] = time.time()
        if self.in_flight[key] == 0:
            self._wake.set()

    def count(self, specialist: str, version: str) -> int:
        return self.in_flight.get((specialist, version), 0)

    async def publish(self) -> None:
        """Every (specialist, version) this router used, in one store round trip."""
        now = time.time()
        by_specialist: dict[str, dict[str, bytes]] = defaultdict(dict)
        for (specialist, version), last in list(self.last_used.items()):
            value = f"{self.in_flight.get((specialist, version), 0)},{last:.3f},{now:.3f}"
            by_specialist[specialist][f"{self.router_id}|{version}"] = value.encode()
        ops: list[HashOp] = [("set", usage_key(specialist), fields) for specialist, fields in by_specialist.items()]
        await self.store.hbatch(ops, min(USAGE_TTL_S, STATE_TTL_S))

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        await stop_task(self._task)
        self._task = None

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.heartbeat_s)
            if self._wake.is_set() and self.coalesce_s > 0:
                await asyncio.sleep(self.coalesce_s)
            self._wake.clear()
            if not self.last_used:
                continue
            try:
                await self.publish()
            except StoreUnavailableError:
                pass
            except Exception:  # noqa: BLE001 - never let the heartbeat die
                log.exception("publishing version usage failed")
