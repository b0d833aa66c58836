"""Adapter residency: is the request's adapter version loaded on the replica (as its engine lists it)."""

from __future__ import annotations

from typing import Sequence

from macaron.router.placement.types import PlacementRequest, Snapshot


class AdapterScorer:
    """1.0 where the engine lists the adapter version, 0.5 where the engine could not be read, 0 elsewhere
    (a request there waits for the adapter to load, or fails); 1.0 for every replica without an adapter."""

    name = "adapter"
    category = "affinity"

    def score(self, request: PlacementRequest, replicas: Sequence[str], snapshot: Snapshot) -> dict[str, float]:
        if not request.adapter:
            return {r: 1.0 for r in replicas}
        out = {}
        for r in replicas:
            loaded = snapshot.adapter_loaded.get(r)
            out[r] = 0.5 if loaded is None else (1.0 if loaded else 0.0)
        return out
