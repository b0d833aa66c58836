"""The client's deadline, read from its request headers: how long the gateway may work on a request.

A client that gives up after T seconds gets nothing from work that finishes later, and work
nobody waits for holds an engine row that queued requests need. So the gateway reads how long
its client waits, answers a little before that (HTTP 504, OpenAI's error body with type
`timeout`), and sends the remaining time on as the router call's gRPC deadline, which every hop
passes on (router → specialist → engine, where the request is aborted and its row freed).

Headers, in order of precedence:

- `x-macaron-timeout`: seconds (a decimal number) the client waits for the whole answer, a
  stream's last byte included. Ours; any HTTP client can send it. A value that is not a positive
  number is a 400.
- `x-stainless-read-timeout`: the official openai clients send their read timeout here (seconds).
  It bounds each wait for bytes: for a plain answer that is the whole answer; for a stream, the
  time until it starts (the gateway sends the headers with the first chunk), after which the
  stream may run on, up to `router_timeout_s`. Values that do not parse are ignored (the header
  is the library's, not the caller's).

Either is capped by `gateway.router_timeout_s`, which also applies when neither is sent. The
gateway keeps `gateway.deadline_margin_s` (at most a quarter of the client's time) for its answer
to reach the client before the client's own timer fires.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from macaron.gateway.errors import GatewayError
from macaron.telemetry import DEADLINE_HEADER

TIMEOUT_HEADER = DEADLINE_HEADER
"""Seconds the caller waits for the whole answer (ours)."""
OPENAI_READ_TIMEOUT_HEADER = "x-stainless-read-timeout"
"""The official openai clients' read timeout in seconds (sent with every request)."""
MAX_MARGIN_SHARE = 0.25
"""The margin never takes more than this share of the client's time (a 2 s client still gets 1.5 s of work)."""
TIMEOUT_CODE = "deadline_exceeded"
T = TypeVar("T")
RECEIVED_AT_KEY = "macaron.received_at"
"""ASGI scope key the request-context middleware sets: when the request arrived (time.monotonic())."""


@dataclass(frozen=True)
class Deadline:
    """When the gateway must have answered (monotonic seconds), and where that came from."""

    expires_at: float
    """The whole call's deadline (the router call's gRPC deadline)."""
    first_chunk_by: float | None = None
    """For a stream under a read timeout: the time by which the stream must have started."""
    source: str = "router_timeout_s"

    def remaining(self) -> float:
        """Seconds left for the whole call (never below zero)."""
        return max(self.expires_at - time.monotonic(), 0.0)

    def first_chunk_remaining(self) -> float:
        """Seconds left until the answer must start."""
        limit = self.expires_at if self.first_chunk_by is None else min(self.first_chunk_by, self.expires_at)
        return max(limit - time.monotonic(), 0.0)

    def call_timeout(self) -> float:
        """The router call's timeout: what is left for the whole call (a 504 when nothing is)."""
        left = self.remaining()
        if left <= 0:
            raise self.expired_error()
        return left

    def expired_error(self) -> GatewayError:
        return expired(self.source)


async def started_by(call: Awaitable[T], deadline: Deadline) -> T:
    """The call's result (a stream, once its first chunk came), or a 504 when the stream must have
    started (a read timeout) and did not: the call is cancelled, down to the engine."""
    if deadline.first_chunk_by is None:
        return await call
    try:
        return await asyncio.wait_for(call, deadline.first_chunk_remaining())
    except TimeoutError:
        raise deadline.expired_error() from None


def expired(source: str) -> GatewayError:
    """The answer for a request whose deadline passed: 504, type `timeout`, and which deadline it was."""
    return GatewayError(504, f"the request did not finish within its deadline ({source}); it was stopped",
                        type="timeout", code=TIMEOUT_CODE)


def client_deadline(headers: Mapping[str, str], *, stream: bool, cap_s: float, margin_s: float,
                    received_at: float | None = None) -> Deadline:
    """The request's deadline from its headers (lower-case names), counted from `received_at`."""
    start = time.monotonic() if received_at is None else received_at
    cap = start + cap_s
    own = headers.get(TIMEOUT_HEADER)
    if own is not None:
        seconds = _seconds(own)
        if seconds is None:
            raise GatewayError(400, f"{TIMEOUT_HEADER} must be a positive number of seconds; got {own[:40]!r}",
                               code="invalid_value", param=TIMEOUT_HEADER)
        return _bounded(start, seconds, cap, margin_s, stream=False, source=TIMEOUT_HEADER)
    read = _seconds(headers.get(OPENAI_READ_TIMEOUT_HEADER))
    if read is not None:
        return _bounded(start, read, cap, margin_s, stream=stream, source=OPENAI_READ_TIMEOUT_HEADER)
    return Deadline(cap)


def _bounded(start: float, seconds: float, cap: float, margin_s: float, *, stream: bool, source: str) -> Deadline:
    # the margin counts from the client's deadline, before comparing with the cap: a client that waits exactly
    # the cap (or a little longer) must still hear the 504 before its own timer fires
    at = start + seconds - min(margin_s, seconds * MAX_MARGIN_SHARE)
    if at >= cap:
        return Deadline(cap)  # the gateway's own deadline comes first, a margin or more before the client's
    if stream:  # a read timeout: the stream must start by then, and may then run on to the cap
        return Deadline(cap, first_chunk_by=at, source=source)
    return Deadline(at, source=source)


def _seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


__all__ = ["Deadline", "OPENAI_READ_TIMEOUT_HEADER", "RECEIVED_AT_KEY", "TIMEOUT_CODE", "TIMEOUT_HEADER", "client_deadline", "expired"]
