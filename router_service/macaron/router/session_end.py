"""A conversation's end, told to every router: its session stops counting as live at once, everywhere.

The spread scorer counts the sessions live on each replica (placement/snapshot.py). Without an end signal a
session counts until one to two spread windows after its last turn, so a client that ends many conversations
and starts new ones sees its new sessions spread around ghosts. `EndSession` (router.proto) forgets the session
and counts it out where this router counted it; the router that counted it may be another one, so the end is
also published on the placement store's `sessions:ended` channel, and every router's `SessionEndFollower` counts
it out of its own counts. Publish/subscribe is fire and forget: a router that misses the message (its store
subscription was down) counts the session out the old way, when its windows pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Callable

from macaron.lifecycle.tasks import stop_task
from macaron.store import Store, StoreUnavailableError, Subscription

log = logging.getLogger(__name__)

CHANNEL = "sessions:ended"
RESUBSCRIBE_S = 1.0
POLL_S = 5.0


async def announce_end(store: Store, session: str) -> int:
    """Tells every router that `session` (its store key, `sessions.session_key`) ended; how many listened."""
    return await store.publish(CHANNEL, session.encode())


class SessionEndFollower:
    """Calls `on_end(session key)` for every session another router (or this one) announces ended."""

    def __init__(self, store: Store, on_end: Callable[[str], None]) -> None:
        self.store = store
        self.on_end = on_end
        self.subscribed = False
        self.messages = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Subscribes now (so an end announced after start is heard), then follows in the background."""
        sub: Subscription | None = None
        with contextlib.suppress(StoreUnavailableError):
            sub = await self.store.subscribe(CHANNEL)
            self.subscribed = True
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._follow(sub))

    async def stop(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)

    async def _follow(self, first: Subscription | None) -> None:
        warned = False
        while True:
            sub, first = first, None
            try:
                if sub is None:
                    sub = await self.store.subscribe(CHANNEL)
                    self.subscribed = True
                    if warned:
                        log.info("session-end subscription restored")
                    warned = False
                while True:
                    message = await sub.next(POLL_S)
                    if message is not None:
                        self.messages += 1
                        self.on_end(message.decode(errors="replace"))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the follower must survive any store trouble
                if not warned:
                    log.warning("session-end subscription lost (%s): resubscribing; ended sessions count out "
                                "when their windows pass meanwhile", exc)
                warned = True
            finally:
                self.subscribed = False
                if sub is not None:
                    with contextlib.suppress(Exception):
                        await sub.close()
            await asyncio.sleep(RESUBSCRIBE_S)
