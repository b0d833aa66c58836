"""Which adapters each base-group replica has loaded, as the engines themselves say.

Placement must only send a request to replicas that have its version loaded, and that must come
from the engines, not from this router's memory of what it loaded: another router, an operator
or a restart may have changed it, and a loaded but idle adapter counts. Every `refresh_s` the
inventory reads each replica's `GET /v1/models` (SGLang and the embedded engine list the base
model, then one card per loaded adapter, `parent` set); `refresh_now()` after an operation.
While nothing changes the reads space out, doubling up to `max_refresh_s` (each read costs
every router CPU on every replica); a change anywhere, a replica that could not be read, a new
or vanished replica (the discovered set is looked at every `refresh_s`, from its cache) or a
`refresh_now()` brings them back to every `refresh_s`. Changes made through any router's
lifecycle are seen from the next request anyway (the version state's revision changes, and the
router reads the engines again before using it); `max_refresh_s` bounds only how late a change
made behind the lifecycle's back (an operator, an engine restart) is seen.

A replica that could not be read is unknown (`has()` is None), not empty: the caller decides.
After each refresh `on_refreshed(replicas)` runs (the lifecycle gives new replicas the versions
in use before they take traffic for them).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable, Iterable, Sequence

from macaron.engine_client import EngineClientError
from macaron.lifecycle.engines import EngineClients
from macaron.lifecycle.tasks import stop_task

log = logging.getLogger(__name__)


class AdapterInventory:
    """Loaded adapter names per replica URL, polled from the engines."""

    def __init__(
        self,
        engines: EngineClients,
        replicas: Callable[[], Awaitable[Sequence[str]]],
        *,
        refresh_s: float = 1.0,
        max_refresh_s: float | None = None,
        timeout_s: float = 2.0,
        on_refreshed: Callable[[Sequence[str]], Awaitable[None]] | None = None,
    ) -> None:
        self.engines = engines
        self._replicas = replicas
        self.refresh_s = refresh_s
        self.max_refresh_s = max(refresh_s, max_refresh_s if max_refresh_s is not None else refresh_s)
        self.interval = refresh_s
        """The poller's current spacing of full reads (refresh_s after a change, up to max_refresh_s)."""
        self.reads = 0
        """Full reads of every replica so far (the poller's and refresh_now's)."""
        self.timeout_s = timeout_s
        self.on_refreshed = on_refreshed
        self.loaded: dict[str, frozenset[str]] = {}
        self.read_at: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._read_set: frozenset[str] = frozenset()
        self._read_at = float("-inf")

    def has(self, replica: str, name: str) -> bool | None:
        """Whether `replica` has adapter `name` loaded; None when the replica could not be read."""
        names = self.loaded.get(replica)
        return None if names is None else name in names

    def replicas_with(self, name: str, replicas: Iterable[str]) -> list[str]:
        return [r for r in replicas if self.has(r, name)]

    def anywhere(self, name: str) -> bool:
        return any(name in names for names in self.loaded.values())

    async def read(self, replica: str) -> frozenset[str] | None:
        try:
            cards = await self.engines.get(replica).list_models(timeout=self.timeout_s)
        except (EngineClientError, OSError, ValueError) as exc:
            log.debug("cannot read the adapters of %s: %s", replica, exc)
            return None
        return frozenset(c.id for c in cards if c.parent)

    async def refresh_now(self, replicas: Sequence[str] | None = None, *, notify: bool = True) -> bool:
        """Reads every replica (all at once) and forgets replicas no longer discovered; `notify`
        runs `on_refreshed` afterwards. Returns whether anything changed (or could not be read); the
        poller then reads again after `refresh_s`."""
        async with self._lock:
            current = list(replicas if replicas is not None else await self._replicas())
            results = await asyncio.gather(*(self.read(r) for r in current))
            self.reads += 1
            before = dict(self.loaded)
            now = time.monotonic()
            for replica, names in zip(current, results):
                if names is None:
                    self.loaded.pop(replica, None)
                else:
                    self.loaded[replica] = names
                    self.read_at[replica] = now
            for gone in set(self.loaded) - set(current):
                self.loaded.pop(gone, None)
            changed = self.loaded != before or any(names is None for names in results)
            self._read_set = frozenset(current)
            self._read_at = now
            self.interval = self.refresh_s  # an operation's or a new state's read: watch closely for a while
        if notify and self.on_refreshed is not None:
            await self.on_refreshed(current)
        return changed

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        await stop_task(self._task)
        self._task = None

    def hurry(self) -> None:
        """Something may have changed behind the lifecycle's back (e.g. a replica restarted): the poller reads
        every replica at its next tick and every `refresh_s` until nothing changes."""
        self.interval = self.refresh_s
        self._read_at = float("-inf")

    async def _due(self) -> bool:
        """Whether the poller reads every replica now: its interval is over, or the discovered set moved."""
        if time.monotonic() - self._read_at >= self.interval:
            return True
        try:
            return frozenset(await self._replicas()) != self._read_set
        except Exception:  # noqa: BLE001 - discovery errors are the discovery's to report; read at the interval
            return False

    async def _run(self) -> None:
        self.hurry()
        while True:
            try:
                if await self._due():
                    interval = self.interval
                    changed = await self.refresh_now()
                    self.interval = self.refresh_s if changed else min(2 * interval, self.max_refresh_s)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the poller must survive a bad answer
                log.exception("adapter inventory refresh failed")
                self.interval = self.refresh_s
            await asyncio.sleep(self.refresh_s)
