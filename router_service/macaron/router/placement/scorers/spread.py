"""Session spread with head grouping: a new session joins the replicas that already hold its prompt's head while
they have room, and is spread over the replicas by recent session counts otherwise.

In-flight load says how busy a replica is now; it says nothing of how many conversations' histories its
cache must keep for their next turns. Two opposite costs decide where a new session goes:

- its head (an application's long system prompt and tools) is prefilled on every replica it is sent to
  for the first time, so spreading the sessions of one head over every replica pays that prefill on each;
- piling every session behind the replica that holds the head makes one cache keep all their histories,
  and it evicts the ones the next turns need while other replicas hold nothing.

So: the replicas that hold a large part of the new session's prompt (`prefix_share`, engine truth where the
replica publishes KV-cache events) take it while they have room: the head once plus every recent session's
expected footprint fits the replica's KV capacity, and the replica is not `max_excess` sessions above the
least used one. Only when no holder has room are the sessions spread (fewest recent sessions first; a holder
whose cache is full scores 0). A turn of a session that already has a replica scores the same everywhere (1.0): moving
it would cost its history, and the session and prefix scorers decide it.
"""

from __future__ import annotations

from typing import Sequence

from macaron.router.placement.types import PlacementRequest, Snapshot
from macaron.router.settings import HeadGroupSettings

HOLDER_RANGE = 0.25
"""Holders with room score 1 - HOLDER_RANGE .. 1 (fewer recent sessions higher), so the pile fills evenly."""


class SessionSpreadScorer:
    """Head holders with room: 0.75..1.0 (fewest sessions highest), everyone else 0. No holder with room:
    (most sessions - this) / (most - fewest), 1.0 where all are equal, 0 for a holder whose cache is full (unless
    every replica is). A request that continues a session: 1.0 everywhere."""

    name = "spread"
    category = "distribution"

    def __init__(self, settings: HeadGroupSettings | None = None) -> None:
        self.settings = settings or HeadGroupSettings()

    def score(self, request: PlacementRequest, replicas: Sequence[str], snapshot: Snapshot) -> dict[str, float]:
        if request.session_replica is not None and request.session_replica in replicas:
            return {r: 1.0 for r in replicas}
        counts = {r: snapshot.sessions.get(r, 0) for r in replicas}
        low = min(counts.values(), default=0)
        holders = [r for r in replicas if snapshot.prefix_share.get(r, 0.0) >= self.settings.min_share]
        roomy = [r for r in holders if self.has_room(r, request, snapshot, counts[r], low)]
        if roomy:
            few, many = min(counts[r] for r in roomy), max(counts[r] for r in roomy)
            span = max(1, many - few)
            return {r: (1.0 - HOLDER_RANGE * (counts[r] - few) / span) if r in roomy else 0.0 for r in replicas}
        full = {r for r in holders if not self.fits(r, request, snapshot, counts[r])}
        if len(full) == len(replicas):
            full = set()
        high = max(counts.values(), default=0)
        return {r: 0.0 if r in full else 1.0 if high == low else (high - n) / (high - low) for r, n in counts.items()}

    def has_room(self, replica: str, request: PlacementRequest, snapshot: Snapshot, sessions: int, fewest: int) -> bool:
        """Whether `replica`, which holds the head, can take one more session without a session-count imbalance
        of `max_excess` or an expected overflow of its KV cache."""
        return sessions - fewest < self.settings.max_excess and self.fits(replica, request, snapshot, sessions)

    def fits(self, replica: str, request: PlacementRequest, snapshot: Snapshot, sessions: int) -> bool:
        """The head once plus (sessions + 1) expected session footprints within the replica's KV capacity
        (always, where the capacity or the prompt's size is unknown)."""
        capacity = snapshot.capacity.get(replica, 0)
        if capacity <= 0 or request.prompt_tokens <= 0:
            return True
        head = snapshot.predicted_tokens.get(replica, 0)
        footprint = self.settings.session_growth * max(0, request.prompt_tokens - head)
        return head + (sessions + 1) * footprint <= capacity
