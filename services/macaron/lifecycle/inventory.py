"""Which adapters each base-group replica has loaded, as the engines themselves say.

Placement must only send a request to replicas that have its version loaded, and that must come
from the engines, not from this router's memory of what it loaded: another router, an operator
or a restart may have changed it, and a loaded but idle adapter counts. Every `refresh_s` the
inventory reads each replica's `GET /v1/models` (SGLang and the embedded engine list the base
model, then one card per loaded adapter, `parent` set); `refresh_now()` after an operation.

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
        timeout_s: float = 2.0,
        on_refreshed: Callable[[Sequence[str]], Awaitable[None]] | None = None,
    ) -> None:
        self.engines = engines
        self._replicas = replicas
        self.refresh_s = refresh_s
        self.timeout_s = timeout_s
        self.on_refreshed = on_refreshed
        self.loaded: dict[str, frozenset[str]] = {}
        self.read_at: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

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

    async def refresh_now(self, replicas: Sequence[str] | None = None, *, notify: bool = True) -> None:
        """Reads every replica (all at once) and forgets replicas no longer discovered; `notify`
        runs `on_refreshed` afterwards."""
        async with self._lock:
            current = list(replicas if replicas is not None else await self._replicas())
            results = await asyncio.gather(*(self.read(r) for r in current))
            now = time.monotonic()
            for replica, names in zip(current, results):
                if names is None:
                    self.loaded.pop(replica, None)
                else:
                    self.loaded[replica] = names
                    self.read_at[replica] = now
            for gone in set(self.loaded) - set(current):
                self.loaded.pop(gone, None)
        if notify and self.on_refreshed is not None:
            await self.on_refreshed(current)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        await stop_task(self._task)
        self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self.refresh_now()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the poller must survive a bad answer
                log.exception("adapter inventory refresh failed")
            await asyncio.sleep(self.refresh_s)
