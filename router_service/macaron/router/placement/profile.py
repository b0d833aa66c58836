"""A placement profile: filters, then weighted scorers, then one picker, then the balance guard.

The loop of llm-d's scheduler profile: scores are clamped to [0, 1], weighted and summed; no
replica left is an error; an unweighted scorer is refused; each plugin's time is recorded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

from macaron.router.placement.pickers import BalanceGuard
from macaron.router.placement.types import Filter, NoReplicaError, Picker, PlacementRequest, Scorer, Snapshot


@dataclass(frozen=True)
class WeightedScorer:
    scorer: Scorer
    weight: float

    def __post_init__(self) -> None:
        if not self.weight > 0:
            raise ValueError(f"scorer {self.scorer.name} needs a positive weight, got {self.weight}")


@dataclass
class Placement:
    """The chosen replica and how it was chosen."""

    replica: str
    scores: dict[str, float]
    """Total weighted score per candidate."""
    by_scorer: dict[str, dict[str, float]] = field(default_factory=dict)
    guarded: bool = False
    """The balance guard replaced the picker's choice with the least loaded replica."""
    plugin_ms: dict[str, float] = field(default_factory=dict)


class PlacementProfile:
    """One policy's pipeline."""

    def __init__(self, name: str, filters: Sequence[Filter], scorers: Sequence[WeightedScorer], picker: Picker,
                 guard: BalanceGuard | None = None) -> None:
        self.name = name
        self.filters = list(filters)
        self.scorers = list(scorers)
        self.picker = picker
        self.guard = guard

    def run(self, request: PlacementRequest, replicas: Sequence[str], snapshot: Snapshot) -> Placement:
        timings: dict[str, float] = {}
        candidates = list(replicas)
        for f in self.filters:
            t = time.perf_counter()
            candidates = f.filter(request, candidates, snapshot)
            timings[f.name] = (time.perf_counter() - t) * 1000
            if not candidates:
                raise NoReplicaError(f"filter {f.name} left no replica of {len(replicas)}")
        if not candidates:
            raise NoReplicaError("no base-group replica is discovered")
        totals = {r: 0.0 for r in candidates}
        by_scorer: dict[str, dict[str, float]] = {}
        for ws in self.scorers:
            t = time.perf_counter()
            scores = ws.scorer.score(request, candidates, snapshot)
            timings[ws.scorer.name] = (time.perf_counter() - t) * 1000
            by_scorer[ws.scorer.name] = scores
            for r in candidates:
                totals[r] += ws.weight * min(1.0, max(0.0, scores.get(r, 0.0)))
        t = time.perf_counter()
        picked = self.picker.pick(request, totals, snapshot)
        timings[self.picker.name] = (time.perf_counter() - t) * 1000
        guarded = False
        if self.guard is not None:
            final = self.guard.apply(picked, candidates, snapshot)
            guarded, picked = final != picked, final
        return Placement(picked, totals, by_scorer, guarded, timings)
