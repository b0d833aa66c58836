"""Admission control at the gateway's front door: at most max_in_flight completions, the excess 429 at once.

Two streams that never end by themselves (the fake router's `slow`) fill a gateway whose limit
is 2; one more request is refused before it reaches the router, in OpenAI's shape; health, models
and metrics still answer; once a stream ends its slot serves the next request.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from engine_api.servers import ThreadedServer
from sdk.fake_router import FakeRouterServer

from .conftest import make_settings, start_gateway

SLOW = {"model": "macaron-auto", "messages": [{"role": "user", "content": "slow"}], "stream": True}
HI = {"model": "macaron-auto", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def small_gateway(fake_router: FakeRouterServer) -> Iterator[ThreadedServer]:
    server = start_gateway(make_settings(fake_router.target,
                                         gateway={"admission": {"max_in_flight": 2, "retry_after_s": 2.5}}))
    yield server
    server.stop()


def metric(server: ThreadedServer, name: str) -> float:
    text = httpx.get(server.url + "/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def wait_metric(server: ThreadedServer, name: str, value: float, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while metric(server, name) != value:
        assert time.monotonic() < deadline, f"{name} is {metric(server, name)}, not {value}"
        time.sleep(0.05)


def test_excess_is_refused_at_once_and_a_freed_slot_serves_again(small_gateway: ThreadedServer,
                                                                 fake: FakeRouterServer) -> None:
    clients = [httpx.Client(base_url=small_gateway.url, timeout=20) for _ in range(2)]
    streams = [c.stream("POST", "/v1/chat/completions", json=SLOW) for c in clients]
    lines = []  # one iterator per stream, kept: dropping one closes its stream
    try:
        for stream in streams:
            response = stream.__enter__()
            assert response.status_code == 200
            lines.append(response.iter_lines())
            next(lines[-1])  # admitted and streaming
        wait_metric(small_gateway, "macaron_gateway_admission_in_flight", 2)
        routed = len(fake.servicer.calls)

        refused = httpx.post(small_gateway.url + "/v1/chat/completions", json=HI, headers={"x-request-id": "r-over"},
                             timeout=20)
        assert refused.status_code == 429, refused.text
        assert refused.headers["retry-after"] == "3"  # 2.5 s, rounded up to whole seconds
        assert refused.headers["x-request-id"] == "r-over"
        error = refused.json()["error"]
        assert error["type"] == "rate_limit_error" and error["code"] == "server_overloaded"
        assert "overloaded" in error["message"] and error["param"] is None
        with pytest.raises(openai.RateLimitError):  # the official client reads it as a 429
            openai.OpenAI(base_url=small_gateway.url + "/v1", api_key="x", max_retries=0).completions.create(
                model="macaron-auto", prompt="hi")
        assert len(fake.servicer.calls) == routed, "a refused request reached the router"

        # Cheap endpoints answer while the work endpoints are full.
        assert httpx.get(small_gateway.url + "/healthz", timeout=10).status_code == 200
        assert httpx.get(small_gateway.url + "/v1/models", timeout=10).status_code == 200
        assert metric(small_gateway, "macaron_gateway_admission_rejected_total") == 2
        assert metric(small_gateway, "macaron_gateway_admission_limit") == 2
    finally:
        streams[0].__exit__(None, None, None)
        clients[0].close()  # one stream ends: its slot is given back

    try:
        wait_metric(small_gateway, "macaron_gateway_admission_in_flight", 1)
        ok = httpx.post(small_gateway.url + "/v1/chat/completions", json=HI, timeout=20)
        assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == "Hello world"
    finally:
        streams[1].__exit__(None, None, None)
        clients[1].close()
    wait_metric(small_gateway, "macaron_gateway_admission_in_flight", 0)


def test_no_limit_when_max_in_flight_is_zero(fake_router: FakeRouterServer) -> None:
    server = start_gateway(make_settings(fake_router.target, gateway={"admission": {"max_in_flight": 0}}))
    clients = [httpx.Client(base_url=server.url, timeout=20) for _ in range(3)]
    streams = [client.stream("POST", "/v1/chat/completions", json=SLOW) for client in clients]  # kept open
    lines = []
    try:
        for stream in streams:  # three streams at once, none ending
            response = stream.__enter__()
            assert response.status_code == 200
            lines.append(response.iter_lines())
            next(lines[-1])
        wait_metric(server, "macaron_gateway_admission_in_flight", 3)
        assert httpx.post(server.url + "/v1/chat/completions", json=HI, timeout=20).status_code == 200
        assert metric(server, "macaron_gateway_admission_rejected_total") == 0
    finally:
        for client in clients:
            client.close()
        server.stop()


def test_retry_after_follows_the_recent_service_time() -> None:
    """Four slots held about 8 s each: one frees every 2 s, so a refused caller is told 2 s (not the fixed floor)."""
    from macaron.admission import AdmissionSettings, InFlightLimit

    settings = AdmissionSettings(max_in_flight=4, retry_after_s=1.0, max_retry_after_s=30.0)
    limit = InFlightLimit(4)
    assert limit.retry_after_s(settings) == 1.0  # nothing finished yet: the floor
    for held in (8.0, 8.0):
        assert limit.try_acquire()
        limit.release(held)
    while limit.try_acquire():
        pass
    assert limit.retry_after_s(settings) == 2.0
    limit.release(0.1)  # fast requests lately: never below the floor
    for _ in range(30):
        limit.try_acquire()
        limit.release(0.1)
    assert limit.retry_after_s(settings) == 1.0
    for _ in range(30):  # very slow ones: never above the cap
        limit.try_acquire()
        limit.release(1000.0)
    assert limit.retry_after_s(settings) == 30.0
