"""Automatic rollback: a canary worse than stable over a sliding window is rolled back by itself.

The router records every finished request per (specialist, version): whether it failed for a
reason the version can cause (INTERNAL, UNAVAILABLE, DEADLINE_EXCEEDED, UNKNOWN, DATA_LOSS;
not the caller's INVALID_ARGUMENT, CANCELLED or a limit) and its time to first token. `judge()`
compares canary with stable over the last `window_s` (thresholds in AutoRollbackSettings):
- error rate: canary - stable > max_error_rate_increase;
- TTFT p95: canary > max_ttft_p95_ratio x max(stable, ttft_floor_s);
only once the canary has `min_requests` requests in the window. The verdict's text is the
reason recorded in the history.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Callable

from macaron.lifecycle.settings import AutoRollbackSettings

VERSION_FAULT_CODES = frozenset({"INTERNAL", "UNAVAILABLE", "DEADLINE_EXCEEDED", "UNKNOWN", "DATA_LOSS"})


@dataclass(frozen=True, slots=True)
class Outcome:
    at: float
    failed: bool
    ttft_s: float | None


@dataclass(frozen=True, slots=True)
class WindowStats:
    requests: int
    errors: int
    ttft_p95_s: float | None

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0


def p95(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


class OutcomeWindow:
    """Recent outcomes per (specialist, version)."""

    def __init__(self, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self.clock = clock
        self._outcomes: dict[tuple[str, str], deque[Outcome]] = defaultdict(deque)

    def record(self, specialist: str, version: str, *, code: str, ttft_s: float | None) -> None:
        self._outcomes[(specialist, version)].append(Outcome(self.clock(), code in VERSION_FAULT_CODES, ttft_s))

    def stats(self, specialist: str, version: str) -> WindowStats:
        q = self._outcomes.get((specialist, version))
        if q is None:
            return WindowStats(0, 0, None)
        horizon = self.clock() - self.window_s
        while q and q[0].at < horizon:
            q.popleft()
        ttfts = [o.ttft_s for o in q if o.ttft_s is not None]
        return WindowStats(len(q), sum(o.failed for o in q), p95(ttfts))

    def forget(self, specialist: str, version: str) -> None:
        self._outcomes.pop((specialist, version), None)


def judge(canary: WindowStats, stable: WindowStats, s: AutoRollbackSettings) -> str | None:
    """Why the canary must be rolled back, or None while it is not (yet) worse than stable."""
    if canary.requests < s.min_requests:
        return None
    increase = canary.error_rate - stable.error_rate
    if increase > s.max_error_rate_increase:
        return (f"auto-rollback: canary error rate {canary.error_rate:.1%} ({canary.errors}/{canary.requests}) vs "
                f"stable {stable.error_rate:.1%} over {s.window_s:.0f} s exceeds +{s.max_error_rate_increase:.1%}")
    if canary.ttft_p95_s is not None and stable.ttft_p95_s is not None:
        base = max(stable.ttft_p95_s, s.ttft_floor_s)
        if canary.ttft_p95_s > s.max_ttft_p95_ratio * base:
            return (f"auto-rollback: canary TTFT p95 {canary.ttft_p95_s * 1000:.0f} ms vs stable "
                    f"{stable.ttft_p95_s * 1000:.0f} ms over {s.window_s:.0f} s exceeds x{s.max_ttft_p95_ratio:g}")
    return None
