"""The shared-state store: one small interface, two implementations (Redis, in-process).

Routers keep sessions, prefix affinity, replica load and rate limits here so that any number
of router replicas agree (Redis), while the embedded stack runs without Redis (in-process).
Only the operations the router needs, each atomic, each with a TTL so abandoned state expires:
both implementations pass the same contract tests (tests/store/).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping, Protocol, Sequence, Union

HashOp = tuple[Literal["set", "del"], str, Union[Mapping[str, bytes], Sequence[str]]]
"""One write of Store.hbatch."""


def chain_depths(chain: Sequence[Mapping[str, bytes]], marks: Mapping[str, bytes]) -> dict[str, int]:
    """Per field of `marks`: how many hashes of `chain`, from the first, hold that field with that mark (what
    `Store.hgetall_many_and_depths` computes on the server)."""
    out: dict[str, int] = {}
    for name, mark in marks.items():
        depth = 0
        for row in chain:
            if row.get(name) != mark:
                break
            depth += 1
        out[name] = depth
    return out


def claim_depths(values: Sequence[bytes | None]) -> dict[str, int]:
    """Each owner's deepest claim among a prompt's leading claim keys, up to the first unclaimed one: owner →
    position of its deepest key + 1 ({} when the first is unclaimed). A claim of block k was made for a prompt
    whose blocks 0..k were all sent there, so its owner holds k + 1 blocks even where earlier keys (a prefix that
    many prompts share, first claimed by another replica) name someone else. What
    `Store.hgetall_many_depths_and_claims` computes on the server."""
    out: dict[str, int] = {}
    for position, value in enumerate(values):
        if value is None:
            break
        out[value.decode()] = position + 1
    return out


class StoreUnavailableError(ConnectionError):
    """The store did not answer within its deadline; callers degrade instead of failing."""


@dataclass(frozen=True)
class RateLimitResult:
    """Outcome of one rate-limit check (sliding window over `window_s`)."""

    allowed: bool
    remaining: int
    retry_after_s: float
    """Seconds until a request would be allowed again (0 when allowed)."""


@dataclass(frozen=True, slots=True)
class Admission:
    """One request's limits, checked and taken together (`Store.admit`): a request-rate window, a token budget
    and a concurrency slot, each optional. All pass or nothing is written: a refused request counts against
    no window and holds no slot."""

    rate_key: str | None = None
    rate_limit: int = 0
    """Requests admitted per `window_s` (sliding window, as `Store.rate_limit`)."""
    window_s: float = 60.0
    tokens_key: str | None = None
    """A hash whose field `used` counts this window's tokens (charged when requests end)."""
    tokens_limit: int = 0
    slots_key: str | None = None
    """A hash of in-flight counts, one field per replica (each releases its own)."""
    slots_field: str = ""
    slots_limit: int = 0
    slots_ttl_s: float = 900.0
    rate_credit: int = 1
    """Admissions of the rate window to take at once (fewer near the limit, at least one): the caller admits the
    rest locally (`macaron.auth` rate credit). Only for a rate-only admission; 1: this request alone."""

    @property
    def checks(self) -> bool:
        """Whether there is any limit to check."""
        return bool(self.rate_key or self.tokens_key or self.slots_key)


@dataclass(frozen=True, slots=True)
class AdmitResult:
    """The verdict on an Admission: `refused` names the limit that refused it ("" when allowed)."""

    allowed: bool
    refused: Literal["", "rate", "tokens", "slots"] = ""
    retry_after_s: float = 0.0
    """The rate window's wait; 0 for the others (the caller knows their windows)."""
    used: int = 0
    """What the refusing limit had used (requests in the window, tokens, slots in flight)."""
    granted: int = 1
    """Rate admissions taken (up to `Admission.rate_credit`; 0 when refused)."""


class Subscription(Protocol):
    """Messages of one publish/subscribe channel, from when it was subscribed. A message published while nobody
    listens is lost (fire and forget): subscribers re-read the state itself now and then."""

    async def next(self, timeout_s: float) -> bytes | None:
        """The next message; None when none came within `timeout_s` (or the wait ended early for no message).
        StoreUnavailableError when the subscription is broken: close it and subscribe again."""
        ...

    async def close(self) -> None: ...


class Store(Protocol):
    """Async key-value operations with TTLs; every call raises StoreUnavailableError on failure."""

    async def get(self, key: str) -> bytes | None: ...

    async def set(self, key: str, value: bytes, ttl_s: float) -> None: ...

    async def delete(self, *keys: str) -> None: ...

    async def expire(self, key: str, ttl_s: float) -> None:
        """Refreshes a key's TTL (sliding expiry); no-op when the key is gone."""
        ...

    async def hset(self, key: str, mapping: Mapping[str, bytes], ttl_s: float) -> None:
        """Sets fields of a hash and (re)sets the hash's TTL."""
        ...

    async def hgetall_many(self, keys: Sequence[str]) -> list[dict[str, bytes]]:
        """Every field of each hash, in one round trip; {} for a missing key."""
        ...

    async def hgetall_many_and_depths(self, keys: Sequence[str], marks_key: str, chain: Sequence[str]
                                      ) -> tuple[list[dict[str, bytes]], dict[str, int]]:
        """`hgetall_many(keys)` and, in the same round trip, for each field of the hash `marks_key` (a name →
        its mark), how many hashes of `chain`, from the first, hold that field with that mark. The server
        counts (one small reply instead of every hash of the chain)."""
        ...

    async def hgetall_many_depths_and_claims(self, keys: Sequence[str], marks_key: str, chain: Sequence[str],
                                             claims: Sequence[str]
                                             ) -> tuple[list[dict[str, bytes]], dict[str, int], dict[str, int]]:
        """`hgetall_many_and_depths(keys, marks_key, chain)` and, in the same round trip, the claims: the string
        keys `claims` hold owners; each owner's deepest position among them + 1, up to the first missing key
        (`claim_depths`; {} when `claims[0]` is missing). Placement reads a request's residency and its head's
        pending claims together."""
        ...

    async def set_many_nx(self, keys: Sequence[str], value: bytes, ttl_s: float) -> int:
        """Sets each key that does not exist to `value` with a TTL (first writer wins), in one round trip;
        returns how many were set."""
        ...

    async def set_nx_get(self, key: str, value: bytes, ttl_s: float) -> bytes | None:
        """Sets `key` to `value` with a TTL unless it exists (one atomic step): None when this call set it, else the
        value it holds (which may equal `value`)."""
        ...

    async def hbatch(self, ops: Sequence[HashOp], ttl_s: float) -> None:
        """Applies hash writes in order, in one round trip: ("set", key, {field: value}) sets fields and
        (re)sets the key's TTL; ("del", key, [field, ...]) deletes fields (the key goes with its last one)."""
        ...

    async def hincrby(self, key: str, field: str, amount: int, ttl_s: float) -> int:
        """Adds to an integer field of a hash and (re)sets the TTL; returns the new value."""
        ...

    async def rate_limit(self, key: str, limit: int, window_s: float, cost: int = 1) -> RateLimitResult:
        """Admits `cost` units if fewer than `limit` were admitted in the last `window_s` seconds."""
        ...

    async def admit(self, admission: Admission) -> AdmitResult:
        """Checks the admission's limits and, when all pass, takes them (one atomic step, one round trip)."""
        ...

    async def hgetall_many_and_admit(self, keys: Sequence[str], admission: Admission
                                     ) -> tuple[list[dict[str, bytes]], AdmitResult]:
        """`hgetall_many(keys)` and `admit(admission)` in the same round trip (a request's state read carries
        its admission)."""
        ...

    async def publish(self, channel: str, message: bytes) -> int:
        """Sends a message to the channel's current subscribers; returns how many got it."""
        ...

    async def subscribe(self, channel: str) -> Subscription:
        """A subscription to the channel, already listening when it returns."""
        ...

    async def ping(self) -> bool: ...

    async def reset(self) -> None:
        """Drops pooled connections (after an outage), so none fails once more when the server is back."""
        ...

    async def close(self) -> None: ...
