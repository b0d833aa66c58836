"""Fixtures of the gateway unit tests: the gateway app on uvicorn (in a thread) over a fake router.

These test the gateway's own mapping (OpenAI shapes, errors, auth, limits, headers, SSE);
the real stack is in tests/e2e.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from engine_api.servers import ThreadedServer
from macaron.auth import hash_api_key
from macaron.config import MacaronSettings
from sdk.fake_router import FakeRouterServer

API_KEY = "mk-gateway-test-key"
LIMITED_KEY = "mk-limited-key"


def make_settings(router_target: str, **top: Any) -> MacaronSettings:
    gateway = {"router_target": router_target, "max_body_bytes": 64 * 1024, "max_messages": 8, "router_timeout_s": 10.0,
               **top.pop("gateway", {})}
    return MacaronSettings(gateway=gateway, **top)


def start_gateway(settings: MacaronSettings) -> ThreadedServer:
    from macaron.gateway.app import create_app
    from macaron.store import MemoryStore

    return ThreadedServer(create_app(settings, store=MemoryStore())).start(health_path="/healthz")


@pytest.fixture(scope="module")
def fake_router() -> Iterator[FakeRouterServer]:
    with FakeRouterServer() as server:
        yield server


@pytest.fixture
def fake(fake_router: FakeRouterServer) -> FakeRouterServer:
    s = fake_router.servicer
    s.calls.clear(), s.cancelled.clear(), s.sessions.clear(), s.attempts.clear()
    return fake_router


@pytest.fixture(scope="module")
def dev_gateway(fake_router: FakeRouterServer) -> Iterator[ThreadedServer]:
    """No keys on loopback: dev mode."""
    server = start_gateway(make_settings(fake_router.target))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def keyed_gateway(fake_router: FakeRouterServer) -> Iterator[ThreadedServer]:
    """Two keys; the limited one may make 2 requests per minute."""
    auth = {"api_keys": [
        {"name": "team-a", "sha256": hash_api_key(API_KEY)},
        {"name": "team-b", "sha256": hash_api_key(LIMITED_KEY), "requests_per_minute": 2},
    ]}
    server = start_gateway(make_settings(fake_router.target, auth=auth))
    yield server
    server.stop()
