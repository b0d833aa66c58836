"""Load: fewer in-flight requests score higher (min-max over the candidates; 1.0 when all equal)."""

from __future__ import annotations

from typing import Sequence

from macaron.router.placement.types import PlacementRequest, Snapshot


class LoadScorer:
    """(most loaded - this) / (most loaded - least loaded)."""

    name = "load"
    category = "distribution"

    def score(self, request: PlacementRequest, replicas: Sequence[str], snapshot: Snapshot) -> dict[str, float]:
        loads = {r: snapshot.load.get(r, 0) for r in replicas}
        low, high = min(loads.values(), default=0), max(loads.values(), default=0)
        if high == low:
            return {r: 1.0 for r in replicas}
        return {r: (high - n) / (high - low) for r, n in loads.items()}
