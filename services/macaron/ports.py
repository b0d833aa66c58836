"""Default ports, fixed in one place so services, tests and the Helm chart agree."""

from __future__ import annotations

ENGINE_PORT = 30000
"""Base-weight group (embedded engine or SGLang); SGLang's own default."""
GATEWAY_PORT = 8080
"""OpenAI-compatible REST gateway."""
ROUTER_PORT = 50051
"""L0 router gRPC."""
SPECIALIST_PORTS: dict[str, int] = {"chat": 50061, "agent": 50062, "code": 50063, "ui": 50064}
"""Specialist gRPC ports, one per specialist."""
METRICS_PORT_OFFSET = 1000
"""A gRPC service's Prometheus port is its gRPC port plus this (router 51051, chat 51061, ...)."""
SPECIALISTS: tuple[str, ...] = ("chat", "agent", "code", "ui")
"""The four specialists, L0..L3, in order."""


def metrics_port(grpc_port: int) -> int:
    """The Prometheus metrics port that belongs to a gRPC service port."""
    return grpc_port + METRICS_PORT_OFFSET
