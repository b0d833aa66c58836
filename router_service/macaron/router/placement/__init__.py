"""Placement of a request on a base-group replica: filters, weighted scorers, a picker (as llm-d)."""

from macaron.router.placement.profile import Placement, PlacementProfile, WeightedScorer
from macaron.router.placement.registry import build_profile, register
from macaron.router.placement.types import NoReplicaError, PlacementRequest, Snapshot

__all__ = [
    "NoReplicaError",
    "Placement",
    "PlacementProfile",
    "PlacementRequest",
    "Snapshot",
    "WeightedScorer",
    "build_profile",
    "register",
]
