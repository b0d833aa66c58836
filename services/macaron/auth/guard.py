"""One auth-and-limits module for the gateway (HTTP) and the router (gRPC).

`Guard.admit(token)` authenticates a bearer key against configured hashes (constant-time) and
applies its per-key limit in the shared store, so N replicas enforce one limit. When the store
is unreachable the limit is kept per process instead (a request never fails because Redis is
down), and `degraded` says so for health and metrics.

`Guard.lease(principal)` checks and takes all of a request's limits (request rate, token budget,
concurrency slot) in one store call (`Store.admit`, one Lua script): a refused request counts
against nothing and holds nothing. The router sends that call inside its state read's pipeline
(`Guard.admission` + `Guard.lease(..., answer=...)`), so admission costs no round trip of its own.

Rate credit: a key with only a request-rate limit takes `auth.rate_credit` admissions of its window at once and
admits locally (`Guard.take_credit`) until they are spent or `auth.rate_credit_ttl_s` passed, so most of its
requests need no admission call at all. Credit is counted in the shared window when taken, so near the limit a
replica may admit up to `rate_credit` requests more over a sliding window than the limit (and credit one replica
holds unspent is counted against the others meanwhile).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Awaitable

from macaron.auth.keys import hash_api_key
from macaron.auth.settings import AuthSettings
from macaron.store import Admission, AdmitResult, MemoryStore, Store, StoreUnavailableError

logger = logging.getLogger(__name__)

LIMIT_WINDOW_S = 60.0
TOKEN_WINDOW_S = 60
"""Token budgets count per clock minute (a fixed window: one counter per key and minute)."""
INFLIGHT_TTL_S = 900.0
"""A replica that dies with requests in flight leaves its count behind; idle keys forget it after this."""


class AuthError(Exception):
    """Missing or unknown key (HTTP 401 / gRPC UNAUTHENTICATED)."""


class RateLimitedError(Exception):
    """Over the key's limit (HTTP 429 / gRPC RESOURCE_EXHAUSTED); `retry_after_s` says when to retry."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class InsecureBindError(ValueError):
    """Dev mode (no keys) asked for on a non-loopback address."""


@dataclass(frozen=True)
class Principal:
    """Who is calling: the key's owner name (namespaces sessions) and its limits."""

    name: str
    requests_per_minute: int
    anonymous: bool = False
    max_concurrent_requests: int | None = None
    tokens_per_minute: int | None = None


class Lease:
    """One admitted request's hold on its key's concurrency and token budgets; `release(tokens)` once it ends."""

    def __init__(self, guard: Guard | None, principal: Principal, store: Store | None) -> None:
        self._guard, self._principal, self._store = guard, principal, store
        self._released = False

    async def release(self, tokens: int = 0) -> None:
        """Gives the concurrency slot back and charges the tokens used (best effort: the store may be down)."""
        if self._released or self._guard is None or self._store is None:
            return
        self._released = True
        await self._guard._release(self._principal, self._store, tokens)


NO_LEASE = Lease(None, Principal("none", 0), None)


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def resolve_dev_mode(settings: AuthSettings, bind_host: str) -> bool:
    """Whether to serve without keys; raises InsecureBindError when that would expose an open service."""
    dev = settings.dev_mode if settings.dev_mode is not None else not settings.api_keys
    if dev and not is_loopback(bind_host):
        raise InsecureBindError(
            f"refusing to serve without API keys on {bind_host}: add auth.api_keys (see `macaron keys create`) "
            "or bind to 127.0.0.1"
        )
    return dev


class Guard:
    """Authenticates keys and enforces per-key request limits."""

    def __init__(self, settings: AuthSettings, store: Store, *, dev_mode: bool) -> None:
        self._settings = settings
        self._store = store
        self._fallback = MemoryStore()
        self._dev_mode = dev_mode
        self.degraded = False
        self._by_hash = {entry.sha256: entry for entry in settings.api_keys}
        self._replica = uuid.uuid4().hex[:12]
        """This process's field in the shared in-flight counters (each replica counts its own)."""
        self._credit: dict[str, tuple[int, float]] = {}
        """Per key: rate admissions taken from the store and not yet used, and when they expire (monotonic)."""

    @property
    def dev_mode(self) -> bool:
        return self._dev_mode

    def authenticate(self, token: str | None) -> Principal:
        """The caller behind a bearer token; AuthError when missing or unknown."""
        if self._dev_mode and not token:
            return Principal("dev", self._settings.dev_requests_per_minute, anonymous=True)
        if not token:
            raise AuthError("missing API key: send it as 'Authorization: Bearer <key>'")
        digest = hash_api_key(token)
        for stored, entry in self._by_hash.items():
            if hmac.compare_digest(stored, digest):
                limit = entry.requests_per_minute or self._settings.default_requests_per_minute
                return Principal(
                    entry.name, limit,
                    max_concurrent_requests=entry.max_concurrent_requests or self._settings.default_max_concurrent_requests,
                    tokens_per_minute=entry.tokens_per_minute or self._settings.default_tokens_per_minute,
                )
        if self._dev_mode:
            return Principal("dev", self._settings.dev_requests_per_minute, anonymous=True)
        raise AuthError("invalid API key")

    async def check_limit(self, principal: Principal) -> None:
        """Counts one request against the caller's limit; RateLimitedError when over it."""
        key = f"ratelimit:{principal.name}"
        try:
            result = await self._store.rate_limit(key, principal.requests_per_minute, LIMIT_WINDOW_S)
            if self.degraded:
                logger.info("shared store is back: per-key limits are shared again")
            self.degraded = False
        except StoreUnavailableError as exc:
            if not self.degraded:
                logger.warning("shared store unavailable (%s): enforcing limits per process", exc)
            self.degraded = True
            result = await self._fallback.rate_limit(key, principal.requests_per_minute, LIMIT_WINDOW_S)
        if not result.allowed:
            raise RateLimitedError(
                f"rate limit of {principal.requests_per_minute} requests per minute exceeded for '{principal.name}'",
                retry_after_s=result.retry_after_s,
            )

    @staticmethod
    def rate_only(principal: Principal) -> bool:
        """Whether the key's only limit is its request rate (no token budget, no concurrency cap)."""
        return principal.tokens_per_minute is None and principal.max_concurrent_requests is None

    def take_credit(self, principal: Principal) -> bool:
        """Admits one request of a rate-only key from this process's credit (no store call); False when it has
        none left (the caller then asks the store, which grants new credit with the verdict)."""
        held = self._credit.get(principal.name)
        if held is None:
            return False
        left, until = held
        if left <= 0 or time.monotonic() >= until or not self.rate_only(principal):
            del self._credit[principal.name]
            return False
        self._credit[principal.name] = (left - 1, until)
        return True

    def _keep_credit(self, principal: Principal, granted: int) -> None:
        if granted <= 1:
            return
        left, _ = self._credit.get(principal.name, (0, 0.0))
        self._credit[principal.name] = (left + granted - 1, time.monotonic() + self._settings.rate_credit_ttl_s)

    def admission(self, principal: Principal, *, rate: bool = True) -> Admission:
        """The caller's limits as one store call: the request rate (unless `rate` is False), the token budget of
        this clock minute and a concurrency slot, where the key has them. A rate-only key asks for its rate
        credit (`auth.rate_credit` admissions at once)."""
        name = principal.name
        tokens = principal.tokens_per_minute
        slots = principal.max_concurrent_requests
        return Admission(
            rate_key=f"ratelimit:{name}" if rate else None, rate_limit=principal.requests_per_minute,
            window_s=LIMIT_WINDOW_S, rate_credit=self._settings.rate_credit if rate and self.rate_only(principal) else 1,
            tokens_key=None if tokens is None else f"tokens:{name}:{int(time.time() // TOKEN_WINDOW_S)}",
            tokens_limit=tokens or 0,
            slots_key=None if slots is None else f"inflight:{name}", slots_field=self._replica,
            slots_limit=slots or 0, slots_ttl_s=INFLIGHT_TTL_S,
        )

    async def lease(self, principal: Principal, admission: Admission | None = None, *,
                    answer: Awaitable[AdmitResult] | None = None) -> Lease:
        """Admits one request: checks and takes its limits in the shared store (`answer`: the store's verdict
        on `admission`, already asked for in another pipeline), or per process while the store is down.
        RateLimitedError when a limit refuses it (it then holds nothing); release the lease when it ends."""
        admission = admission if admission is not None else self.admission(principal)
        store = self._store
        try:
            result = await (answer if answer is not None else store.admit(admission))
            if self.degraded:
                logger.info("shared store is back: per-key limits are shared again")
            self.degraded = False
        except StoreUnavailableError as exc:
            if not self.degraded:
                logger.warning("shared store unavailable (%s): enforcing limits per process", exc)
            self.degraded = True
            store = self._fallback
            result = await store.admit(admission)
        if not result.allowed:
            raise self._refusal(principal, admission, result)
        if admission.rate_credit > 1:
            self._keep_credit(principal, result.granted)
        if admission.slots_key is None and admission.tokens_key is None:
            return NO_LEASE
        return Lease(self, principal, store)

    async def acquire(self, principal: Principal) -> Lease:
        """Takes a concurrency slot and checks the token budget of the caller's key (no request-rate count),
        shared in the store, in one call; RateLimitedError when either is spent. Release the lease when the
        request ends."""
        if principal.max_concurrent_requests is None and principal.tokens_per_minute is None:
            return NO_LEASE
        return await self.lease(principal, self.admission(principal, rate=False))

    @staticmethod
    def _refusal(principal: Principal, admission: Admission, result: AdmitResult) -> RateLimitedError:
        name = principal.name
        if result.refused == "tokens":
            window = int(time.time() // TOKEN_WINDOW_S)
            retry = (window + 1) * TOKEN_WINDOW_S - time.time()
            return RateLimitedError(f"token budget of {principal.tokens_per_minute} tokens per minute spent for "
                                    f"'{name}' ({result.used} used this minute)", retry_after_s=max(retry, 0.001))
        if result.refused == "slots":
            return RateLimitedError(f"'{name}' already has {principal.max_concurrent_requests} request(s) in flight, "
                                    "its limit; retry when one ends", retry_after_s=1.0)
        return RateLimitedError(f"rate limit of {principal.requests_per_minute} requests per minute exceeded for "
                                f"'{name}'", retry_after_s=max(result.retry_after_s, 0.001))

    async def _release(self, principal: Principal, store: Store, tokens: int) -> None:
        try:
            if principal.max_concurrent_requests is not None:
                await store.hincrby(f"inflight:{principal.name}", self._replica, -1, INFLIGHT_TTL_S)
            if principal.tokens_per_minute is not None and tokens > 0:
                window = int(time.time() // TOKEN_WINDOW_S)
                await store.hincrby(f"tokens:{principal.name}:{window}", "used", tokens, 2 * TOKEN_WINDOW_S)
        except StoreUnavailableError as exc:
            logger.warning("could not release '%s''s limits in the shared store (%s)", principal.name, exc)

    async def admit(self, token: str | None) -> Principal:
        """authenticate + check_limit: the one call a server makes per request."""
        principal = self.authenticate(token)
        await self.check_limit(principal)
        return principal
