"""Prefix affinity: the share of the prompt a replica holds in its KV cache (longest match)."""

from __future__ import annotations

from typing import Sequence

from macaron.router.placement.types import PlacementRequest, Snapshot


class PrefixScorer:
    """The snapshot's prefix share (engine truth where a replica publishes KV-cache events, else the
    approximate index); matched blocks / prompt blocks when no share was computed; 0 without blocks."""

    name = "prefix"
    category = "affinity"

    def score(self, request: PlacementRequest, replicas: Sequence[str], snapshot: Snapshot) -> dict[str, float]:
        if snapshot.prefix_share:
            return {r: min(1.0, snapshot.prefix_share.get(r, 0.0)) for r in replicas}
        total = snapshot.total_blocks
        if total <= 0:
            return {r: 0.0 for r in replicas}
        return {r: min(1.0, snapshot.prefix.get(r, 0) / total) for r in replicas}
