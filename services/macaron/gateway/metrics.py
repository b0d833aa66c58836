"""Prometheus metrics of the gateway, in a registry per app (so tests can build many apps)."""

from __future__ import annotations

from collections import deque
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
RECENT_ROUTES = 1024
"""Routing-time samples kept for exact recent percentiles (`/stats`)."""


class GatewayMetrics:
    """Requests, latency, time to first chunk, tokens and route decisions."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "macaron_gateway_requests", "HTTP requests to /v1/chat/completions by model, outcome status and stream.",
            ["model", "status", "stream"], registry=r,
        )
        self.latency = Histogram(
            "macaron_gateway_request_seconds", "Time from request to the last byte of the answer.",
            ["model", "stream"], buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.first_chunk = Histogram(
            "macaron_gateway_time_to_route_seconds", "Time from request until the router's first chunk (the route).",
            ["model"], buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.in_flight = Gauge("macaron_gateway_in_flight_requests", "Chat requests being answered now.", registry=r)
        self.routes = Counter(
            "macaron_gateway_routes", "Route decisions seen by the gateway, by specialist and reason.",
            ["specialist", "reason"], registry=r,
        )
        self.tokens = Counter(
            "macaron_gateway_tokens", "Tokens by kind (prompt, completion, cached) and specialist.",
            ["kind", "specialist"], registry=r,
        )
        self.auth_failures = Counter(
            "macaron_gateway_auth_failures", "Requests refused by auth (401) or the key's rate limit (429).",
            ["status"], registry=r,
        )
        self.admission_limit = Gauge(
            "macaron_gateway_admission_limit", "Completions this replica serves at once (gateway.admission.max_in_flight; "
            "0: no limit).", registry=r,
        )
        self.admission_in_flight = Gauge(
            "macaron_gateway_admission_in_flight", "Completions admitted and not finished (a stream until its last byte).",
            registry=r,
        )
        self.admission_rejected = Counter(
            "macaron_gateway_admission_rejected", "Requests refused at the front door with 429 (server_overloaded) because "
            "max_in_flight completions were running.", ["path"], registry=r,
        )
        self.disconnects = Counter(
            "macaron_gateway_client_disconnects", "Streams the client left before the end (cancelled downstream).",
            registry=r,
        )

        # --- per specialist and adapter version (the route's; "unversioned" for the plain adapter) ---
        labels = ["specialist", "version"]
        self.version_requests = Counter(
            "macaron_gateway_version_requests_total", "Chat completions by specialist, adapter version and HTTP status.",
            [*labels, "status"], registry=r,
        )
        self.version_time_to_route = Histogram(
            "macaron_gateway_version_time_to_route_seconds",
            "Time from request until the router's first chunk, by specialist and adapter version.",
            labels, buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.version_tokens = Counter(
            "macaron_gateway_version_tokens_total", "Tokens by specialist, adapter version and kind (prompt, completion, cached).",
            [*labels, "kind"], registry=r,
        )
        self.recent_time_to_route: deque[float] = deque(maxlen=RECENT_ROUTES)
        """Seconds from request to the router's first chunk (routing, forwarding, the specialist's first event)."""
        self.recent_route_ms: deque[float] = deque(maxlen=RECENT_ROUTES)
        """Milliseconds the router itself spent deciding and placing (`Route.route_ms`)."""

    @staticmethod
    def _version_labels(route: Any) -> tuple[str, str]:
        if route is None:
            return "none", "none"
        return route.specialist or "none", route.adapter_version or "unversioned"

    def observe_route(self, route: Any, seconds: float) -> None:
        """The router's first chunk arrived after `seconds`: counted under the route's version."""
        self.recent_time_to_route.append(seconds)
        if route is not None and route.route_ms > 0:
            self.recent_route_ms.append(route.route_ms)
        if route is not None:
            self.version_time_to_route.labels(*self._version_labels(route)).observe(seconds)

    def count_version(self, route: Any, status: int, usage: Any = None) -> None:
        """One finished completion (and its tokens) under its specialist and version."""
        specialist, version = self._version_labels(route)
        self.version_requests.labels(specialist, version, str(status)).inc()
        if usage is not None:
            for kind in ("prompt", "completion", "cached"):
                self.version_tokens.labels(specialist, version, kind).inc(getattr(usage, f"{kind}_tokens", 0) or 0)

    def render(self) -> bytes:
        return generate_latest(self.registry)
