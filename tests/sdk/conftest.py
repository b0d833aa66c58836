"""Fixtures of the SDK unit tests: a scripted fake router on loopback (one per module)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .fake_router import FakeRouterServer


@pytest.fixture(scope="module")
def fake_router() -> Iterator[FakeRouterServer]:
    with FakeRouterServer() as server:
        yield server


@pytest.fixture
def fake(fake_router: FakeRouterServer) -> FakeRouterServer:
    fake_router.servicer.calls.clear()
    fake_router.servicer.cancelled.clear()
    fake_router.servicer.sessions.clear()
    fake_router.servicer.attempts.clear()
    return fake_router
