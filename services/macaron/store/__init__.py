"""Shared state for routers and gateways: `open_store(url)` gives Redis or an in-process store."""

from __future__ import annotations

from macaron.store.base import Admission, AdmitResult, RateLimitResult, Store, StoreUnavailableError, Subscription
from macaron.store.memory import MemoryStore
from macaron.store.redis_store import RedisStore


def open_store(redis_url: str | None, timeout_s: float = 0.25, key_prefix: str = "macaron:") -> Store:
    """RedisStore when a URL is given, else a MemoryStore (single process only)."""
    if redis_url:
        return RedisStore(redis_url, timeout_s=timeout_s, key_prefix=key_prefix)
    return MemoryStore()


__all__ = ["Admission", "AdmitResult", "MemoryStore", "RateLimitResult", "RedisStore", "Store", "StoreUnavailableError", "Subscription",
           "open_store"]
