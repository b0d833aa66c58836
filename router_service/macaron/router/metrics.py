"""The router's Prometheus metrics, on a registry of its own (several routers may share a process in tests)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
RATIO_BUCKETS = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
SERVE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
VERSION_LABELS = ["specialist", "version"]


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
        self.read_ahead = Counter(
            "macaron_router_read_ahead_total", "Placement reads started before the decision, by outcome (hit: the "
            "guessed specialist and version were right, miss: read again, none: no guess).", ["outcome"], registry=r,
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
        self.landings_moved = Counter(
            "macaron_router_landings_moved_total",
            "New heads sent to their next best replica because another router's new head had just landed on the pick.",
            registry=r,
        )
        self.prefix_match = Histogram(
            "macaron_router_prefix_match_ratio", "Share of the prompt's blocks cached on the chosen replica.",
            buckets=RATIO_BUCKETS, registry=r,
        )
        self.index_predictions = Counter(
            "macaron_router_index_predictions_total",
            "Served requests whose cached prompt tokens the index predicted, by source (engine events or approximate).",
            ["source"], registry=r,
        )
        self.index_overclaims = Counter(
            "macaron_router_index_overclaims_total",
            "Of those, requests where the index predicted more cached tokens than the engine reported.",
            ["source"], registry=r,
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
        self.state_reads = Counter(
            "macaron_router_state_reads_total", "Version states a request routed by, by where they came from (push: "
            "held in memory from the subscription, no store read; store: read with the request; last_known: the "
            "store did not answer).", ["source"], registry=r,
        )
        self.admissions = Counter(
            "macaron_router_admissions_total", "Admission verdicts (request rate, token budget, concurrency slot) by "
            "where they came from (credit: this router's rate credit, no store call; store: the shared store; "
            "process: per process while the store is down).", ["source"], registry=r,
        )
        # --- per adapter version (SGLang's own /metrics has no per-adapter labels) ---
        self.version_choices = Counter(
            "macaron_router_version_decisions_total",
            "Adapter version choices by specialist, version and reason (stable, canary, session, retired, "
            "canary_unavailable).", ["specialist", "version", "reason"], registry=r,
        )
        self.version_requests = Counter(
            "macaron_router_version_requests_total", "Finished Generate calls by specialist, version and gRPC code.",
            [*VERSION_LABELS, "code"], registry=r,
        )
        self.version_in_flight = Gauge(
            "macaron_router_version_in_flight", "Generate streams in flight by specialist and version.", VERSION_LABELS,
            registry=r,
        )
        self.version_ttft = Histogram(
            "macaron_router_time_to_first_token_seconds", "Time from the request to its first token, by version.",
            VERSION_LABELS, buckets=SERVE_BUCKETS, registry=r,
        )
        self.version_tpot = Histogram(
            "macaron_router_time_per_output_token_seconds", "Time per output token after the first, by version.",
            VERSION_LABELS, buckets=TOKEN_BUCKETS, registry=r,
        )
        self.version_e2e = Histogram(
            "macaron_router_e2e_request_latency_seconds", "Time from the request to its last chunk, by version.",
            VERSION_LABELS, buckets=SERVE_BUCKETS, registry=r,
        )
        self.version_tokens = Counter(
            "macaron_router_tokens_total", "Tokens by specialist, version and kind (prompt, completion, cached).",
            [*VERSION_LABELS, "kind"], registry=r,
        )
        self.canary_share = Gauge(
            "macaron_router_canary_share_ratio", "Configured canary share of new sessions, by specialist and canary.",
            VERSION_LABELS, registry=r,
        )
