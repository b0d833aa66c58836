"""`GET /stats`: a few live figures from the gateway's own metrics, as JSON a page can show.

Prometheus text (`/metrics`) is for scrapers; a person watching the playground wants four
numbers: where requests went (route mix), how long routing took (p50/p99), how much of the
prompt the prefix cache served, and which adapter versions answered each specialist. Counts
are read from the gateway's registry (nothing is counted twice). Routing time is what the
router reports on each route (`route_ms`: decide and place, store round trips included);
time to route is the gateway's own view (request until the router's first chunk, which the
specialist sends once its engine took the request). Percentiles are exact over the last
`RECENT_ROUTES` requests, not read from histogram buckets.
"""

from __future__ import annotations

import math
from typing import Any

from prometheus_client import Counter

from macaron.gateway.metrics import RECENT_ROUTES, GatewayMetrics


def _totals(counter: Counter) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of each child of a labelled counter."""
    return [(dict(s.labels), s.value) for metric in counter.collect() for s in metric.samples
            if s.name.endswith("_total")]


def percentile(samples: list[float], q: float) -> float | None:
    """The q-quantile (0..1) by nearest rank; None without samples."""
    if not samples:
        return None
    ordered = sorted(samples)
    rank = max(1, min(len(ordered), math.ceil(q * len(ordered) - 1e-9)))
    return ordered[rank - 1]


def _quantiles(samples_ms: list[float]) -> dict[str, Any]:
    p50, p99 = percentile(samples_ms, 0.50), percentile(samples_ms, 0.99)
    return {"p50": None if p50 is None else round(p50, 2), "p99": None if p99 is None else round(p99, 2),
            "samples": len(samples_ms), "window": RECENT_ROUTES}


def summarize(metrics: GatewayMetrics) -> dict[str, Any]:
    """The figures `/stats` returns (shape documented on the route)."""
    mix: dict[str, dict[str, Any]] = {}
    for labels, value in _totals(metrics.routes):
        entry = mix.setdefault(labels["specialist"], {"requests": 0, "reasons": {}})
        entry["requests"] += int(value)
        entry["reasons"][labels["reason"]] = entry["reasons"].get(labels["reason"], 0) + int(value)
    routed = sum(e["requests"] for e in mix.values())
    for entry in mix.values():
        entry["share"] = round(entry["requests"] / routed, 4) if routed else 0.0

    tokens = {"prompt": 0, "completion": 0, "cached": 0}
    for labels, value in _totals(metrics.tokens):
        tokens[labels["kind"]] = tokens.get(labels["kind"], 0) + int(value)

    versions: dict[str, dict[str, int]] = {}
    for labels, value in _totals(metrics.version_requests):
        if labels["specialist"] == "none" or labels["status"] != "200":
            continue
        served = versions.setdefault(labels["specialist"], {})
        served[labels["version"]] = served.get(labels["version"], 0) + int(value)

    return {
        "routed_requests": routed,
        "route_mix": dict(sorted(mix.items())),
        "routing_ms": _quantiles(list(metrics.recent_route_ms)),
        "time_to_route_ms": _quantiles([s * 1000 for s in metrics.recent_time_to_route]),
        "tokens": {**tokens, "cached_share": round(tokens["cached"] / tokens["prompt"], 4) if tokens["prompt"] else 0.0},
        "versions": dict(sorted(versions.items())),
    }


__all__ = ["percentile", "summarize"]
