"""The router's Prometheus metrics, on a registry of its own (several routers may share a process in tests)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
RATIO_BUCKETS = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)


class RouterMetrics:
    """Counters of decisions (by reason and specialist), placements, forwarding and the store."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.decisions = Counter(
            "macaron_router_decisions_total", "Routing decisions by reason and specialist.", ["reason", "specialist"],
            registry=r,
        )
        self.confidence = Histogram(
            "macaron_router_decision_confidence", "Confidence of routing decisions, by reason.", ["reason"],
            buckets=RATIO_BUCKETS, registry=r,
        )
        self.decision_seconds = Histogram(
            "macaron_router_decision_seconds", "Time to decide the specialist (classifier, session read, judge).",
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self.route_seconds = Histogram(
            "macaron_router_route_seconds", "Time to decide and place a request (store round trips included).",
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self.judge = Counter(
            "macaron_router_judge_total", "Judge calls by outcome (ok, timeout, error).", ["outcome"], registry=r
        )
        self.placements = Counter(
            "macaron_router_placements_total", "Placements by policy and replica.", ["policy", "replica"], registry=r
        )
        self.balance_overrides = Counter(
            "macaron_router_balance_guard_total", "Picks the balance guard replaced with the least loaded replica.",
            registry=r,
        )
        self.prefix_match = Histogram(
            "macaron_router_prefix_match_ratio", "Share of the prompt's blocks cached on the chosen replica.",
            buckets=RATIO_BUCKETS, registry=r,
        )
        self.requests = Counter(
            "macaron_router_requests_total", "Finished calls by method and gRPC status code.", ["method", "code"],
            registry=r,
        )
        self.in_flight = Gauge("macaron_router_in_flight", "Streams being forwarded now.", registry=r)
        self.retries = Counter(
            "macaron_router_forward_retries_total", "Retries on another pool replica before the first chunk.",
            ["specialist"], registry=r,
        )
        self.degraded = Gauge(
            "macaron_router_store_degraded", "1 while the shared store (Redis) is unreachable.", registry=r
        )
        self.store_errors = Counter(
            "macaron_router_store_errors_total", "Shared-store operations that failed (then degraded).", registry=r
        )
