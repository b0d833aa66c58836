"""Prometheus metrics of the gateway, in a registry per app (so tests can build many apps)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


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
        self.disconnects = Counter(
            "macaron_gateway_client_disconnects", "Streams the client left before the end (cancelled downstream).",
            registry=r,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
