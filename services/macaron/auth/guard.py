"""One auth-and-limits module for the gateway (HTTP) and the router (gRPC).

`Guard.admit(token)` authenticates a bearer key against configured hashes (constant-time) and
applies its per-key limit in the shared store, so N replicas enforce one limit. When the store
is unreachable the limit is kept per process instead (a request never fails because Redis is
down), and `degraded` says so for health and metrics.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from dataclasses import dataclass

from macaron.auth.keys import hash_api_key
from macaron.auth.settings import AuthSettings
from macaron.store import MemoryStore, Store, StoreUnavailableError

logger = logging.getLogger(__name__)

LIMIT_WINDOW_S = 60.0


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
    """Who is calling: the key's owner name (namespaces sessions) and its limit."""

    name: str
    requests_per_minute: int
    anonymous: bool = False


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
                return Principal(entry.name, limit)
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

    async def admit(self, token: str | None) -> Principal:
        """authenticate + check_limit: the one call a server makes per request."""
        principal = self.authenticate(token)
        await self.check_limit(principal)
        return principal
