"""Pickers (one replica out of the scored ones) and the balance guard applied after the pick."""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass
from typing import Mapping

from macaron.router.placement.types import PlacementRequest, Snapshot

TIE_EPSILON = 1e-9


def rendezvous(key: str, replicas: list[str]) -> str:
    """The replica with the highest hash of (key, replica): the same on every router, spread over keys."""
    return max(replicas, key=lambda r: hashlib.blake2b(f"{key}\x00{r}".encode(), digest_size=8).digest())


class MaxScorePicker:
    """The highest total score; ties go to the least loaded, then to a rendezvous hash of the tie key."""

    name = "max_score"

    def pick(self, request: PlacementRequest, scored: Mapping[str, float], snapshot: Snapshot) -> str:
        best = max(scored.values())
        tied = [r for r, s in scored.items() if s >= best - TIE_EPSILON]
        if len(tied) > 1:
            least = min(snapshot.load.get(r, 0) for r in tied)
            tied = [r for r in tied if snapshot.load.get(r, 0) == least]
        return tied[0] if len(tied) == 1 else rendezvous(request.tie_key, sorted(tied))


class RoundRobinPicker:
    """Each replica in turn (per router replica; ignores scores)."""

    name = "round_robin"

    def __init__(self) -> None:
        self._turn = itertools.count()

    def pick(self, request: PlacementRequest, scored: Mapping[str, float], snapshot: Snapshot) -> str:
        replicas = sorted(scored)
        return replicas[next(self._turn) % len(replicas)]


@dataclass(frozen=True)
class BalanceGuard:
    """Cache-aware routers' imbalance rule: when the picked replica has more than `abs_threshold`
    more in-flight requests than the least loaded one and more than `rel_threshold` times its
    load, the least loaded one is taken instead (SGLang's cache_aware balance thresholds)."""

    abs_threshold: int = 8
    rel_threshold: float = 1.5
    name: str = "balance_guard"

    def apply(self, picked: str, candidates: list[str], snapshot: Snapshot) -> str:
        load = snapshot.load
        least = min(candidates, key=lambda r: (load.get(r, 0), r))
        mine, low = load.get(picked, 0), load.get(least, 0)
        if mine - low > self.abs_threshold and mine > self.rel_threshold * low:
            return least
        return picked
