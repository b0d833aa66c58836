"""Every router's load and session spread, kept in process and renewed beside the traffic, not in its path.

Placement needs two shared counts besides the KV-cache index: the in-flight requests of every router on each
replica (`load`) and the sessions placed on each replica in the recent windows (`spread:<n>`). Each router
publishes its own load at most every 20 ms (`LoadTracker.coalesce_s`), so a read per request buys no fresher
figures than one read every few tens of milliseconds, yet it puts a store round trip in front of every first
token. Here a request places on the rows it finds and, when they are older than `refresh_s`, starts one read in
the background for the requests after it (stale-while-revalidate): under traffic the rows are at most about
`refresh_s` plus a round trip old, and the reads cost at most one per `refresh_s` however many requests come.
Between requests a slow renewal every `idle_refresh_s` keeps them at most that old, so the first request after a
pause does not pay the round trip either (a 25 ms poller at all times cost a router about 1 ms of CPU per read,
4 % of a core; the slow one costs a tenth of that). Rows older than `max_age_s` (the store did not answer) or of
another spread window are read inline. This router's own counts are always added live (`LoadTracker.merge`,
`SnapshotReader`'s own sessions), so its own recent placements are never missed, whatever the rows' age.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Sequence

from macaron.store import Store, StoreUnavailableError

log = logging.getLogger(__name__)


class SharedCounts:
    """The last rows read of a list of hashes, their age, and the one background read that renews them."""

    def __init__(self, store: Store, *, refresh_s: float, max_age_s: float, idle_refresh_s: float = 0.25) -> None:
        self.store = store
        self.refresh_s = refresh_s
        self.max_age_s = max_age_s
        """0: no kept rows, every request reads them itself."""
        self.idle_refresh_s = idle_refresh_s
        """0: no renewal between requests."""
        self._idle: asyncio.Task[None] | None = None
        self._keys: tuple[str, ...] = ()
        self._rows: list[dict[str, bytes]] = []
        self._at = float("-inf")
        self._renewing: asyncio.Task[None] | None = None
        self.background_reads = 0
        self.inline_reads = 0

    @property
    def read_at(self) -> float:
        """When the kept rows' read was sent (monotonic; -inf before the first)."""
        return self._at

    def cached(self, keys: Sequence[str]) -> list[dict[str, bytes]] | None:
        """The rows of `keys` if they are young enough to place on (None: read them inline), and starts a
        background read when they are older than `refresh_s`."""
        if self.max_age_s <= 0:
            return None
        if self.idle_refresh_s > 0 and (self._idle is None or self._idle.done()):
            self._idle = asyncio.get_running_loop().create_task(self._keep_young(), name="placement-counts-idle")
        if tuple(keys) != self._keys:
            return None
        age = time.monotonic() - self._at
        if age > self.max_age_s:
            return None
        if age > self.refresh_s and (self._renewing is None or self._renewing.done()):
            self._renewing = asyncio.get_running_loop().create_task(self._renew(self._keys), name="placement-counts")
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

    async def _keep_young(self) -> None:
        """Renews the rows every `idle_refresh_s` unless requests did meanwhile (a read in the last half period:
        the loop may wake a little early, and a strict `>= idle_refresh_s` would then skip to every other period)."""
        while True:
            await asyncio.sleep(self.idle_refresh_s)
            if self._keys and time.monotonic() - self._at >= self.idle_refresh_s / 2:
                if self._renewing is None or self._renewing.done():
                    await self._renew(self._keys)

    async def _renew(self, keys: tuple[str, ...]) -> None:
        at = time.monotonic()
        try:
            rows = await self.store.hgetall_many(keys)
        except StoreUnavailableError:
            return  # the rows age out; a request then reads inline and degrades as before
        except Exception:  # noqa: BLE001 - a failed renewal only leaves the rows older
            log.exception("renewing the placement counts failed")
            return
        self.background_reads += 1
        self.put(keys, rows, at)

    async def aclose(self) -> None:
        tasks = {t for t in (self._renewing, self._idle) if t is not None and not t.done()}
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=1.0)
