"""Prefix affinity: the share of the prompt's blocks a replica served recently (longest match)."""

from __future__ import annotations

from typing import Sequence

from macaron.router.placement.types import PlacementRequest, Snapshot


class PrefixScorer:
    """matched blocks / prompt blocks; 0 for every replica when the prompt has no full block."""

    name = "prefix"
    category = "affinity"

    def score(self, request: PlacementRequest, replicas: Sequence[str], snapshot: Snapshot) -> dict[str, float]:
        total = snapshot.total_blocks
        if total <= 0:
            return {r: 0.0 for r in replicas}
        return {r: min(1.0, snapshot.prefix.get(r, 0) / total) for r in replicas}
