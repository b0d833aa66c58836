"""Which base-group replica serves a request: the router's hint if it is ours, else the least loaded.

A hint is obeyed only when it names one of this specialist's discovered replicas; anything
else is refused, so a request can never make the specialist call an arbitrary URL. Load is
this process's in-flight count per replica (ties rotate). A replica that refused a
connection is skipped for `cooldown_s` while others remain.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from contextlib import contextmanager
from typing import Iterator

from macaron.discovery import DiscoveryError, ReplicaSource, normalize_url
from macaron.specialist.errors import BadRequestError, UnavailableError


class ReplicaPicker:
    """Least-loaded choice among discovered replicas, with hint checking."""

    def __init__(self, source: ReplicaSource, cooldown_s: float = 5.0) -> None:
        self.source = source
        self.cooldown_s = cooldown_s
        self.in_flight: Counter[str] = Counter()
        self._down_until: dict[str, float] = {}
        self._turn = itertools.count()

    async def replicas(self) -> tuple[str, ...]:
        """Discovered replicas; UnavailableError when none can be found."""
        try:
            found = await self.source.replicas()
        except DiscoveryError as exc:
            raise UnavailableError(f"no engine replica can be discovered: {exc}") from exc
        if not found:
            raise UnavailableError("no engine replica is discovered")
        return found

    async def pick(self, hint: str | None = None, exclude: frozenset[str] = frozenset()) -> str:
        """The replica for one attempt; BadRequestError for a foreign hint, UnavailableError if none is left."""
        found = await self.replicas()
        if hint:
            try:
                wanted = normalize_url(hint)
            except ValueError:
                raise BadRequestError(f"engine_replica_hint {hint!r} is not an http(s) URL") from None
            if wanted not in found:
                raise BadRequestError(
                    f"engine_replica_hint {hint!r} is not one of this specialist's engine replicas"
                )
            if wanted not in exclude:
                return wanted
        candidates = [u for u in found if u not in exclude]
        if not candidates:
            raise UnavailableError("no engine replica answers")
        now = time.monotonic()
        healthy = [u for u in candidates if self._down_until.get(u, 0.0) <= now] or candidates
        least = min(self.in_flight[u] for u in healthy)
        tied = [u for u in healthy if self.in_flight[u] == least]
        return tied[next(self._turn) % len(tied)]

    def mark_down(self, url: str) -> None:
        """Skips `url` for a while (it refused a connection)."""
        self._down_until[url] = time.monotonic() + self.cooldown_s

    @contextmanager
    def track(self, url: str) -> Iterator[None]:
        """Counts one in-flight request on `url` while the block runs."""
        self.in_flight[url] += 1
        try:
            yield
        finally:
            self.in_flight[url] -= 1
