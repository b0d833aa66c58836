"""Session spread: new sessions go where fewer sessions were placed recently, so each replica's KV cache holds
the histories of about as many conversations as the others.

In-flight load says how busy a replica is now; it says nothing of how many conversations' histories its
cache must keep for their next turns. A cache-aware router that sends every new session after the shared
system prompt (or a hash of it) piles sessions on a few replicas, whose caches then evict the histories
the next turns needed. This scorer counts, per replica, the sessions placed there in the last window
(`Snapshot.sessions`, shared by every router replica in the placement store) and prefers the fewest.
A turn of a session that already has a replica scores the same everywhere (1.0): moving it would cost
its history, and the session and prefix scorers decide it.
"""

from __future__ import annotations

from typing import Sequence

from macaron.router.placement.types import PlacementRequest, Snapshot


class SessionSpreadScorer:
    """(most sessions - this) / (most - fewest) for requests without a session replica; 1.0 for every replica
    when all are equal, or when the request continues a session."""

    name = "spread"
    category = "distribution"

    def score(self, request: PlacementRequest, replicas: Sequence[str], snapshot: Snapshot) -> dict[str, float]:
        if request.session_replica is not None and request.session_replica in replicas:
            return {r: 1.0 for r in replicas}
        counts = {r: snapshot.sessions.get(r, 0) for r in replicas}
        low, high = min(counts.values(), default=0), max(counts.values(), default=0)
        if high == low:
            return {r: 1.0 for r in replicas}
        return {r: (high - n) / (high - low) for r, n in counts.items()}
