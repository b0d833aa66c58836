"""What one load run does: target, arrival shape, bounds. Validated before anything is sent."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

MAX_DURATION_S = 3600.0
MAX_REQUESTS = 100_000


class LoopbackOnlyError(ValueError):
    """The target is not on this machine: the load generator refuses to load anything else."""


def target_host(target: str) -> str:
    """Host part of `http://host:port` (REST) or `host:port` (gRPC)."""
    if "://" in target:
        return urlsplit(target).hostname or ""
    host = target.rsplit(":", 1)[0] if ":" in target else target
    return host.strip("[]")


def require_loopback(target: str) -> None:
    """Raises LoopbackOnlyError unless every address the target's host resolves to is loopback."""
    host = target_host(target)
    if not host:
        raise LoopbackOnlyError(f"cannot read a host from {target!r}; use http://127.0.0.1:PORT or 127.0.0.1:PORT")
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError as exc:
        raise LoopbackOnlyError(f"cannot resolve {host!r} ({exc}); use 127.0.0.1") from None
    if not addresses or not all(ipaddress.ip_address(a.split("%", 1)[0]).is_loopback for a in addresses):
        raise LoopbackOnlyError(
            f"{target} is not a loopback address: the load generator only loads this machine (use 127.0.0.1)"
        )


@dataclass
class LoadConfig:
    """One run: open loop (`rate` requests/s, Poisson arrivals) or closed loop (`concurrency` clients)."""

    target: str
    """REST: the gateway's base URL (http://127.0.0.1:8080); gRPC: the router's host:port."""
    transport: Literal["rest", "grpc"] = "rest"
    rate: float | None = None
    concurrency: int | None = None
    duration_s: float = 30.0
    max_requests: int = 1000
    timeout_s: float = 60.0
    """Deadline of one request; a request without an answer by then counts as lost."""
    turns: int = 3
    """Turns per session; each turn resends the whole history (shared system prompt first)."""
    max_tokens: int = 16
    model: str = "macaron-auto"
    api_key: str | None = None
    stream: bool = True
    seed: int = 0
    max_retries: int = 0
    """gRPC only: the SDK's retries before the first chunk (0: every error is counted as answered)."""

    def validate(self) -> None:
        """Raises ValueError (LoopbackOnlyError for a remote target) on a run that must not start."""
        if (self.rate is None) == (self.concurrency is None):
            raise ValueError("give exactly one of rate (open loop, requests/s) or concurrency (closed loop)")
        if self.rate is not None and not 0 < self.rate <= 10_000:
            raise ValueError("rate must be in (0, 10000] requests/s")
        if self.concurrency is not None and not 1 <= self.concurrency <= 4096:
            raise ValueError("concurrency must be in [1, 4096]")
        if not 0 < self.duration_s <= MAX_DURATION_S:
            raise ValueError(f"duration must be in (0, {MAX_DURATION_S:.0f}] s")
        if not 1 <= self.max_requests <= MAX_REQUESTS:
            raise ValueError(f"max_requests must be in [1, {MAX_REQUESTS}]")
        if not 0 < self.timeout_s <= 600:
            raise ValueError("timeout must be in (0, 600] s")
        if self.turns < 1 or self.max_tokens < 1:
            raise ValueError("turns and max_tokens must be at least 1")
        if self.transport not in ("rest", "grpc"):
            raise ValueError("transport must be rest or grpc")
        if self.transport == "rest" and not self.target.startswith(("http://", "https://")):
            raise ValueError("a REST target is the gateway's URL, e.g. http://127.0.0.1:8080")
        require_loopback(self.target)
