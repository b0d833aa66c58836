"""Auth and limits: hashed keys, shared limits across replicas, degraded mode without Redis."""

from __future__ import annotations

import socket
import uuid

import pytest

from macaron.auth import (
    ApiKeyEntry,
    AuthError,
    AuthSettings,
    Guard,
    InsecureBindError,
    RateLimitedError,
    hash_api_key,
    new_api_key,
    resolve_dev_mode,
)
from macaron.store import MemoryStore, RedisStore


def _settings(key: str, rpm: int = 3) -> AuthSettings:
    return AuthSettings(api_keys=[ApiKeyEntry(name=f"team-{uuid.uuid4().hex[:6]}", sha256=hash_api_key(key), requests_per_minute=rpm)])


def test_keys_are_random_and_hashes_are_stable() -> None:
    a, b = new_api_key(), new_api_key()
    assert a != b and a.startswith("mk-") and len(a) > 40
    assert hash_api_key(a) == hash_api_key(a) and len(hash_api_key(a)) == 64


def test_plain_keys_are_refused_in_config() -> None:
    with pytest.raises(ValueError, match="64 hex"):
        ApiKeyEntry(name="x", sha256="mk-not-a-hash")


async def test_unknown_and_missing_keys_are_refused() -> None:
    key = new_api_key()
    guard = Guard(_settings(key), MemoryStore(), dev_mode=False)
    assert (await guard.admit(key)).name.startswith("team-")
    with pytest.raises(AuthError, match="missing API key"):
        await guard.admit(None)
    with pytest.raises(AuthError, match="invalid API key"):
        await guard.admit("mk-wrong")


async def test_two_replicas_share_one_limit_through_redis(redis_url: str) -> None:
    key = new_api_key()
    settings = _settings(key, rpm=3)
    prefix = f"test:{uuid.uuid4().hex}:"
    replicas = [Guard(settings, RedisStore(redis_url, timeout_s=2.0, key_prefix=prefix), dev_mode=False) for _ in range(2)]
    await replicas[0].admit(key)
    await replicas[1].admit(key)
    await replicas[0].admit(key)
    with pytest.raises(RateLimitedError) as info:
        await replicas[1].admit(key)
    assert 0 < info.value.retry_after_s <= 60


async def test_dead_store_degrades_to_per_process_limits() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    key = new_api_key()
    guard = Guard(_settings(key, rpm=2), RedisStore(f"redis://127.0.0.1:{port}/0", timeout_s=0.1), dev_mode=False)
    await guard.admit(key)
    assert guard.degraded
    await guard.admit(key)
    with pytest.raises(RateLimitedError):
        await guard.admit(key)


def test_dev_mode_only_on_loopback() -> None:
    assert resolve_dev_mode(AuthSettings(), "127.0.0.1") is True
    assert resolve_dev_mode(AuthSettings(), "::1") is True
    with pytest.raises(InsecureBindError, match="refusing to serve without API keys"):
        resolve_dev_mode(AuthSettings(), "0.0.0.0")
    assert resolve_dev_mode(_settings(new_api_key()), "0.0.0.0") is False


async def test_dev_mode_admits_anonymous_callers() -> None:
    guard = Guard(AuthSettings(), MemoryStore(), dev_mode=True)
    principal = await guard.admit(None)
    assert principal.anonymous and principal.name == "dev"
