"""Version states pushed to routers instead of read from the store on every request.

The writer (an operation, through `VersionStore.write`) saves the state, then `StatePublisher.announce` publishes
the change on the store's `lifecycle:changes` channel and waits until every live router acknowledged it (at most
`state_ack_timeout_s`), so "the update is committed" still means "every router routes by it": a client that
changed a version through one router and then sends a request through another sees the change.

Each router's `StateFollower` subscribes to the channel, re-reads every state on each message (one round trip,
so a lost or reordered message cannot leave it behind), re-reads them all every `state_resync_s` anyway (a missed
message or a dead subscription heals within it), and after each read writes its beat: when, and the revision of
each state it now holds, in the hash `lifecycle:routers`. That beat is both the acknowledgement and the liveness
the writer checks: a router silent for LIVE_FACTOR x `state_resync_s` is not waited for.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Mapping

from macaron.lifecycle.tasks import stop_task
from macaron.lifecycle.versions import SpecialistState
from macaron.store import Store, StoreUnavailableError, Subscription

log = logging.getLogger(__name__)

CHANNEL = "lifecycle:changes"
ROUTERS_KEY = "lifecycle:routers"
LIVE_FACTOR = 3.0
"""A router whose last beat is older than this many resync periods is not waited for."""
PRUNE_FACTOR = 60.0
"""A router silent this many resync periods is gone: the writer drops its beat."""
ACK_POLL_S = 0.005
ROUTERS_TTL_S = 30 * 86400.0
RESUBSCRIBE_S = 1.0


@dataclass(frozen=True, slots=True)
class Beat:
    """A router's acknowledgement: when it last read every state, and the revision of each it holds."""

    at: float
    revisions: Mapping[str, int]

    def encode(self) -> bytes:
        return json.dumps({"at": self.at, "revisions": dict(self.revisions)}).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Beat | None:
        try:
            body = json.loads(raw)
            return cls(float(body["at"]), {str(k): int(v) for k, v in body["revisions"].items()})
        except (ValueError, TypeError, KeyError, AttributeError):
            return None


class StatePublisher:
    """The writer's side: announce a saved state and wait for the live routers' acknowledgements."""

    def __init__(self, store: Store, *, ack_timeout_s: float, resync_s: float) -> None:
        self.store = store
        self.ack_timeout_s = ack_timeout_s
        self.resync_s = resync_s

    async def announce(self, state: SpecialistState) -> list[str]:
        """Publishes the change and waits; returns the live routers that did not acknowledge in time."""
        message = json.dumps({"specialist": state.specialist, "revision": state.revision}).encode()
        await self.store.publish(CHANNEL, message)
        deadline = time.monotonic() + self.ack_timeout_s
        while True:
            pending, gone = self._pending(await self.store.hgetall_many([ROUTERS_KEY]), state)
            if not pending or time.monotonic() >= deadline:
                break
            await asyncio.sleep(ACK_POLL_S)
        if gone:
            with contextlib.suppress(StoreUnavailableError):
                await self.store.hbatch([("del", ROUTERS_KEY, gone)], ROUTERS_TTL_S)
        if pending:
            log.warning("%s@rev%d: routers %s did not acknowledge within %.1f s; they catch up within %.1f s",
                        state.specialist, state.revision, ", ".join(sorted(pending)), self.ack_timeout_s,
                        self.resync_s)
        return pending

    def _pending(self, rows: list[dict[str, bytes]], state: SpecialistState) -> tuple[list[str], list[str]]:
        now = time.time()
        pending, gone = [], []
        for router_id, raw in (rows[0] if rows else {}).items():
            beat = Beat.decode(raw)
            age = now - beat.at if beat is not None else float("inf")
            if age > PRUNE_FACTOR * self.resync_s:
                gone.append(router_id)
            elif age <= LIVE_FACTOR * self.resync_s and beat is not None \
                    and beat.revisions.get(state.specialist, -1) < state.revision:
                pending.append(router_id)
        return pending, gone


class StateFollower:
    """A router's side: keeps the states current from the channel and a periodic full read, and acknowledges.

    `read` reads every state from the store and installs it (the router's `VersionRuntime.read_states`: it also
    refreshes the engines' adapter lists when a revision moved, before the acknowledgement goes out)."""

    def __init__(self, store: Store, router_id: str, read: Callable[[], Awaitable[Mapping[str, SpecialistState]]],
                 *, resync_s: float) -> None:
        self.store = store
        self.router_id = router_id
        self.read = read
        self.resync_s = resync_s
        self.ready = False
        """True once one full read succeeded: from then on requests route by the states held here."""
        self.subscribed = False
        self.reads = 0
        self.messages = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Subscribes and reads once now (so the first request has current states), then follows in the
        background."""
        sub = None
        try:
            sub = await self.store.subscribe(CHANNEL)
            self.subscribed = True
            await self.resync()  # after subscribing: a change made before it is in this read
        except StoreUnavailableError:
            pass
        if sub is not None and not self.ready:  # subscribed but not read: the loop starts over
            self.subscribed = False
            with contextlib.suppress(Exception):
                await sub.close()
            sub = None
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._follow(sub))

    async def stop(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)

    async def resync(self) -> None:
        """Reads every state, then writes this router's beat (its acknowledgement of what it read)."""
        states = await self.read()
        self.reads += 1
        self.ready = True
        beat = Beat(time.time(), {name: st.revision for name, st in states.items()})
        await self.store.hset(ROUTERS_KEY, {self.router_id: beat.encode()}, ROUTERS_TTL_S)

    async def _follow(self, first: Subscription | None) -> None:
        """`first`: a subscription already made and read after (start's)."""
        warned = False
        while True:
            sub, first = first, None
            try:
                if sub is None:
                    sub = await self.store.subscribe(CHANNEL)
                    self.subscribed = True
                    await self.resync()  # after subscribing: a change made before it is in this read
                if warned:
                    log.info("version-state subscription restored")
                warned = False
                due = time.monotonic() + self.resync_s
                while True:
                    message = await sub.next(max(due - time.monotonic(), 0.0))
                    if message is not None:
                        self.messages += 1
                    elif time.monotonic() < due:
                        continue
                    await self.resync()
                    due = time.monotonic() + self.resync_s
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the follower must survive any store trouble
                if not warned:
                    log.warning("version-state subscription lost (%s): resubscribing; states are re-read on the way",
                                exc)
                warned = True
            finally:
                self.subscribed = False
                if sub is not None:
                    with contextlib.suppress(Exception):
                        await sub.close()
            await asyncio.sleep(min(RESUBSCRIBE_S, self.resync_s))
