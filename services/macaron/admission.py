"""Admission control at the front door: a bound on work in flight, and an immediate refusal beyond it.

Under overload a request that waits in a queue deep in the path (a specialist's stream slots, an
engine's queue, retries with backoff) is refused seconds later, after it used the gateway, the
router and a specialist. Like Text Generation Inference's `max_concurrent_requests` ("Model is
overloaded", 429) and Envoy's circuit breakers (a bound on pending and active requests, the excess
answered at once), the gateway and the router each hold at most `max_in_flight` requests (a
stream counts until its last byte); one more is answered at once, before any routing or queueing:
HTTP 429 with `Retry-After` and an OpenAI-style body, or gRPC RESOURCE_EXHAUSTED with
google.rpc.RetryInfo. Accepted requests run as before: nothing is queued, dropped or sent twice.

This module is light (pydantic only): the configuration imports the settings.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class AdmissionSettings(BaseModel):
    """Bound on requests in flight in one process; the excess is refused at once with retry information."""

    model_config = ConfigDict(extra="forbid")

    max_in_flight: int = Field(
        256, ge=0, description="Requests (a stream until its last byte) one replica serves at once; one more is "
        "refused at once, before routing or queueing, with 429 + Retry-After (REST) or RESOURCE_EXHAUSTED + "
        "RetryInfo (gRPC). Size it to what the replicas behind can serve; 0: no limit.",
    )
    retry_after_s: float = Field(
        1.0, gt=0, description="Least delay suggested to a refused caller (Retry-After, rounded up to whole seconds; "
        "RetryInfo and retry-after-ms in milliseconds). The delay suggested is the time until a slot is likely to "
        "free up: the recent service time of one request divided by max_in_flight, never below this.",
    )
    max_retry_after_s: float = Field(
        30.0, gt=0, description="Longest delay suggested to a refused caller, however slow the recent requests were.",
    )


class InFlightLimit:
    """Counts requests in flight against a limit; `try_acquire` never waits (no queue by design).

    Used from one event loop (the gateway's or the router's), so a plain counter is enough: between
    the check and the increment there is no await for another request to slip in.
    """

    SMOOTHING = 0.2
    """Weight of the newest request in the recent service time (an exponentially weighted mean)."""

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError(f"the in-flight limit must be >= 0 (0: none), not {limit}")
        self.limit = limit
        self.in_flight = 0
        self.service_s: float | None = None
        """Recent time one admitted request held its slot (None before the first one finished)."""

    def try_acquire(self) -> bool:
        """Takes a slot and returns True, or returns False at the limit."""
        if self.limit and self.in_flight >= self.limit:
            return False
        self.in_flight += 1
        return True

    def release(self, held_s: float | None = None) -> None:
        """Gives back a slot taken by `try_acquire`; `held_s` (how long it was held) feeds the recent service time."""
        if self.in_flight <= 0:
            raise RuntimeError("release() without a matching try_acquire()")
        self.in_flight -= 1
        if held_s is not None and held_s >= 0:
            self.service_s = held_s if self.service_s is None else (
                self.SMOOTHING * held_s + (1 - self.SMOOTHING) * self.service_s)

    def retry_after_s(self, settings: AdmissionSettings) -> float:
        """When a refused caller should come back: about when the next slot frees up.

        With `limit` requests running that each take `service_s`, one finishes every
        `service_s / limit` on average; bounded by the settings' least and longest delay."""
        if self.service_s is None or not self.limit:
            return settings.retry_after_s
        waiting = max(self.in_flight - self.limit + 1, 1)
        estimate = self.service_s * waiting / self.limit
        return round(min(max(estimate, settings.retry_after_s), max(settings.max_retry_after_s, settings.retry_after_s)), 3)


OVERLOADED_MESSAGE = "the server is overloaded ({in_flight} requests in flight, the limit of this replica); retry after {retry_after}"
"""What a refused caller reads (REST error.message, gRPC details)."""


def overloaded_message(limit: InFlightLimit, retry_after_s: float) -> str:
    return OVERLOADED_MESSAGE.format(in_flight=limit.in_flight, retry_after=f"{retry_after_s:g} s")


__all__ = ["AdmissionSettings", "InFlightLimit", "overloaded_message"]
