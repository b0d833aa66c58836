"""Session: the replica the session's previous turn went to (its KV cache holds the history)."""

from __future__ import annotations

from typing import Sequence

from macaron.router.placement.types import PlacementRequest, Snapshot


class SessionScorer:
    """1.0 for the session's previous replica, 0 for the others (and for all without a session)."""

    name = "session"
    category = "affinity"

    def score(self, request: PlacementRequest, replicas: Sequence[str], snapshot: Snapshot) -> dict[str, float]:
        return {r: 1.0 if r == request.session_replica else 0.0 for r in replicas}
