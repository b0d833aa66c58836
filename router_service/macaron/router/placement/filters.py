"""Filters: which replicas may take the request at all."""

from __future__ import annotations

from typing import Sequence

from macaron.router.placement.types import PlacementRequest, Snapshot


class HealthyFilter:
    """Drops replicas this router saw fail recently, unless that would leave none."""

    name = "healthy"

    def filter(self, request: PlacementRequest, replicas: Sequence[str], snapshot: Snapshot) -> list[str]:
        healthy = [r for r in replicas if r not in snapshot.down]
        return healthy or list(replicas)
