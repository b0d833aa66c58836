"""Every router's load and session spread, kept in process and renewed beside the traffic, not in its path.

Placement needs two shared counts besides the KV-cache index: the in-flight requests of every router on each
replica (`load`) and the sessions placed on each replica in the recent windows (`spread:<n>`). Each router
publishes its own load at most every 20 ms (`LoadTracker.coalesce_s`), so a read per request buys no fresher
figures than one read every few tens of milliseconds, yet it puts a store round trip in front of every first
token. Here the rows are read every `refresh_s` by a background task while the router is in use (it stops after
`idle_s` without a request, and the next request starts it again), as llm-d's scheduler scrapes its engines'
metrics on a fixed period rather than per request. A request places on the rows it finds and reads inline only
when they are older than `max_age_s` (the router was idle, or the store is slow) or the spread window turned.
This router's own counts are always added live (`LoadTracker.merge`, `SnapshotReader`'s own sessions), so its
own recent placements are never missed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Sequence

from macaron.store import Store, StoreUnavailableError

log = logging.getLogger(__name__)


class SharedCounts:
    """The last rows read of a list of hashes, their age, and the task that renews them while requests come."""

    def __init__(self, store: Store, *, refresh_s: float, max_age_s: float, idle_s: float = 10.0) -> None:
        self.store = store
        self.refresh_s = refresh_s
        self.max_age_s = max_age_s
        """0: no kept rows, every request reads them itself."""
        self.idle_s = idle_s
        self._keys: tuple[str, ...] = ()
        self._rows: list[dict[str, bytes]] = []
        self._at = float("-inf")
        self._used = float("-inf")
        self._poller: asyncio.Task[None] | None = None
        self.background_reads = 0
        self.inline_reads = 0

    @property
    def read_at(self) -> float:
        """When the kept rows' read was sent (monotonic; -inf before the first)."""
        return self._at

    def cached(self, keys: Sequence[str]) -> list[dict[str, bytes]] | None:
        """The rows of `keys` if they are young enough to place on (None: read them inline); keeps the renewing
        task running while requests come."""
        if self.max_age_s <= 0:
            return None
        now = time.monotonic()
        self._used = now
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll(), name="placement-counts")
        if tuple(keys) != self._keys or now - self._at > self.max_age_s:
            return None
        return self._rows

    def put(self, keys: Sequence[str], rows: list[dict[str, bytes]], at: float) -> None:
        """Rows read at `at` (monotonic, when the read was sent); an older read never replaces a newer one."""
        if tuple(keys) == self._keys and at <= self._at:
            return
        self._keys, self._rows, self._at = tuple(keys), rows, at

    async def read(self, keys: Sequence[str]) -> list[dict[str, bytes]]:
        """Reads the rows now (the caller waits), and keeps them."""
        at = time.monotonic()
        rows = await self.store.hgetall_many(keys)
        self.inline_reads += 1
        self.put(keys, rows, at)
        return rows

    async def _poll(self) -> None:
        """Renews the kept rows every `refresh_s` until `idle_s` pass without a request."""
        while time.monotonic() - self._used <= self.idle_s:
            if self._keys and time.monotonic() - self._at >= self.refresh_s * 0.9:
                keys, at = self._keys, time.monotonic()
                try:
                    rows = await self.store.hgetall_many(keys)
                except StoreUnavailableError:
                    pass  # the rows age out; a request then reads inline and degrades as before
                except Exception:  # noqa: BLE001 - a failed renewal only leaves the rows older
                    log.exception("renewing the placement counts failed")
                else:
                    self.background_reads += 1
                    self.put(keys, rows, at)
            await asyncio.sleep(self.refresh_s)

    async def aclose(self) -> None:
        task = self._poller
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=1.0)
