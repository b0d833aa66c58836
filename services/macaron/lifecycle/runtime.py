"""What one router replica runs for adapter versions: state reads, version choice, placement filter,
usage, the inventory poller, automatic rollback, and the operations the admin service calls."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Awaitable, Callable, Mapping, Sequence

from macaron.lifecycle.assign import VersionChoice, choose_version
from macaron.lifecycle.engines import EngineClients
from macaron.lifecycle.gate import PromotionGate, Scorer, load_scorer
from macaron.lifecycle.inventory import AdapterInventory
from macaron.lifecycle.operations import Lifecycle
from macaron.lifecycle.push import StateFollower, StatePublisher
from macaron.lifecycle.settings import LifecycleSettings
from macaron.lifecycle.store import VersionStore, state_key
from macaron.lifecycle.tasks import stop_task
from macaron.lifecycle.usage import UsageTracker
from macaron.lifecycle.versions import SpecialistState, VersionError
from macaron.lifecycle.watcher import OutcomeWindow, judge
from macaron.store import Store, StoreUnavailableError

log = logging.getLogger(__name__)
AUTO_ACTOR = "router:auto-rollback"


class VersionRuntime:
    """Adapter versions as seen by one router."""

    def __init__(
        self,
        settings: LifecycleSettings,
        store: Store,
        defaults: Mapping[str, SpecialistState],
        replicas: Callable[[], Awaitable[Sequence[str]]],
        router_id: str,
        *,
        scorer: Scorer | None = None,
        engine_api_key: str | None = None,
    ) -> None:
        self.settings = settings
        self.router_id = router_id
        self.engines = EngineClients(settings.engine_timeout_s, api_key=engine_api_key)
        self.versions = VersionStore(store, dict(defaults))
        self.inventory = AdapterInventory(self.engines, replicas, refresh_s=settings.inventory_refresh_s,
                                          max_refresh_s=settings.inventory_max_refresh_s,
                                          on_refreshed=self._provision)
        self.usage = UsageTracker(store, router_id, heartbeat_s=settings.usage_heartbeat_s,
                                  coalesce_s=settings.usage_coalesce_s)
        if scorer is None and settings.gate_scorer:
            scorer = load_scorer(settings.gate_scorer)
        gate = PromotionGate(scorer, settings.gate_margin) if scorer is not None else None
        self.ops = Lifecycle(settings, self.versions, self.inventory, self.engines, replicas, gate=gate)
        self.window = OutcomeWindow(settings.auto_rollback.window_s)
        self.last_states: dict[str, SpecialistState] = dict(defaults)
        self.rollbacks: list[tuple[str, str, str]] = []
        """(specialist, version, reason) of each automatic rollback made by this router."""
        self._watch: asyncio.Task[None] | None = None
        self._revisions: dict[str, int] = {n: st.revision for n, st in defaults.items()}
        self._refreshing: asyncio.Future[None] | None = None
        self.follower: StateFollower | None = None
        if settings.state_push:
            self.versions.publisher = StatePublisher(store, ack_timeout_s=settings.state_ack_timeout_s,
                                                     resync_s=settings.state_resync_s)
            self.follower = StateFollower(store, router_id, self.read_states, resync_s=settings.state_resync_s)

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.inventory.refresh_now(notify=False), self.settings.engine_timeout_s)
        self.inventory.start()
        self.usage.start()
        if self.follower is not None:
            await self.follower.start()
        if self.settings.auto_rollback.enabled and self._watch is None:
            self._watch = asyncio.get_running_loop().create_task(self._watch_loop())

    async def aclose(self) -> None:
        if self.follower is not None:
            await self.follower.stop()
        await stop_task(self._watch)
        self._watch = None
        await stop_task(self._refreshing)  # type: ignore[arg-type]
        await self.inventory.stop()
        await self.usage.stop()
        with contextlib.suppress(StoreUnavailableError):
            await self.usage.publish()
        await self.engines.aclose()

    # ------------------------------------------------------------ per request

    @property
    def pushed(self) -> bool:
        """Whether requests route by the states held in memory (kept by the subscription), reading none."""
        return self.follower is not None and self.follower.ready

    async def read_states(self) -> dict[str, SpecialistState]:
        """Every specialist's state from the store, installed (raises StoreUnavailableError)."""
        return await self.accept(await self.versions.store.hgetall_many(self.state_keys()))

    def state_keys(self) -> list[str]:
        """The store keys of every specialist's state (a caller may read them in its own pipeline)."""
        return [state_key(n) for n in self.versions.defaults]

    async def states(self) -> dict[str, SpecialistState]:
        """Every specialist's state (one store round trip); the last known ones while the store is down."""
        try:
            raws = await self.versions.store.hgetall_many(self.state_keys())
        except StoreUnavailableError:
            return self.last_states
        return await self.accept(raws)

    async def accept(self, raws: Sequence[Mapping[str, bytes]]) -> dict[str, SpecialistState]:
        """The states from raw hashes read in `state_keys()` order (e.g. with the session, in one round trip).

        When a state changed since the last read (another router loaded a version, say), the engines'
        adapter lists are read again before the first request sees it (one refresh, shared by every
        request arriving meanwhile), so a new canary is placed at once, not at the next poll."""
        states = self.versions.decode_all(raws)
        revisions = {n: st.revision for n, st in states.items()}
        if revisions != self._revisions:
            if self._refreshing is None or self._refreshing.done():
                self._refreshing = asyncio.ensure_future(self._refresh_for(revisions))
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._refreshing), self.inventory.timeout_s)
        self.last_states = states
        return states

    async def _refresh_for(self, revisions: dict[str, int]) -> None:
        await self.inventory.refresh_now(notify=False)
        self._revisions = revisions

    def available(self, state: SpecialistState, version: str) -> bool:
        """Whether some replica has the version loaded (stable always counts: it is the fallback)."""
        return version == state.stable or self.inventory.anywhere(state.engine_name(version))

    def choose(self, state: SpecialistState, session_version: str | None, key: str) -> VersionChoice:
        return choose_version(state, session_version=session_version, key=key,
                              available=lambda v: self.available(state, v))

    def filter_replicas(self, state: SpecialistState, version: str, replicas: Sequence[str]) -> list[str]:
        """Only replicas whose engine lists the version; all of them when none can be read (stable only)."""
        having = self.inventory.replicas_with(state.engine_name(version), replicas)
        return having or list(replicas)

    def finished(self, specialist: str, version: str, *, code: str, ttft_s: float | None) -> None:
        self.window.record(specialist, version, code=code, ttft_s=ttft_s)

    # ------------------------------------------------------------ background

    async def _provision(self, replicas: Sequence[str]) -> None:
        await self.ops.provision(replicas, self.last_states)

    async def check_canaries(self) -> list[tuple[str, str, str]]:
        """Rolls back every canary worse than its stable now; returns what it rolled back."""
        done = []
        for name, state in (await self.states()).items():
            if not state.canary:
                continue
            reason = judge(self.window.stats(name, state.canary), self.window.stats(name, state.stable),
                           self.settings.auto_rollback)
            if reason is None:
                continue
            try:
                await self.ops.rollback(name, actor=AUTO_ACTOR, reason=reason, expected=state.canary)
            except VersionError:
                continue  # another router was faster
            log.warning("%s@%s rolled back: %s", name, state.canary, reason)
            self.window.forget(name, state.canary)
            done.append((name, state.canary, reason))
        self.rollbacks += done
        return done

    async def _watch_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.auto_rollback.check_s)
            try:
                await self.check_canaries()
            except StoreUnavailableError:
                pass
            except Exception:  # noqa: BLE001 - the watcher must survive
                log.exception("canary check failed")
