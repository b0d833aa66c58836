"""The playground's server side over a fake router: the page and its assets, /stats, the stream's summary.

The page itself is driven in a real browser in tests/e2e/test_playground_browser.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import httpx
import pytest

from engine_api.servers import ThreadedServer
from macaron.gateway import playground
from macaron.gateway.stats import percentile
from sdk.fake_router import ROUTE_MS, FakeRouterServer

from .conftest import API_KEY, make_settings, start_gateway


@pytest.fixture
def fresh_keyed_gateway(fake_router: FakeRouterServer) -> Iterator[ThreadedServer]:
    """A gateway of its own (its counters start at zero), with one key."""
    from macaron.auth import hash_api_key

    server = start_gateway(make_settings(fake_router.target, auth={"api_keys": [
        {"name": "team-a", "sha256": hash_api_key(API_KEY)}]}))
    yield server
    server.stop()


def stream(server: ThreadedServer, content: str, key: str = API_KEY, **extra: object) -> tuple[httpx.Headers, list]:
    body = {"model": "macaron-auto", "messages": [{"role": "user", "content": content}], "stream": True, **extra}
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=20.0,
                      headers={"authorization": f"Bearer {key}"}) as response:
        assert response.status_code == 200, response.read()
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    return response.headers, [json.loads(line[len("data: "):]) for line in lines[:-1]]


def test_the_page_and_its_assets_are_served_without_anything_from_outside(dev_gateway: ThreadedServer) -> None:
    page = httpx.get(dev_gateway.url + "/", timeout=10.0)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "playground/static/playground.js" in page.text
    assets = {name: httpx.get(f"{dev_gateway.url}/playground/static/{name}", timeout=10.0)
              for name in ("playground.js", "playground.css")}
    assert assets["playground.js"].status_code == 200 and "javascript" in assets["playground.js"].headers["content-type"]
    assert assets["playground.css"].status_code == 200
    # no CDN: nothing the page loads or imports names another host
    for text in (page.text, *(a.text for a in assets.values())):
        assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)
        assert not re.search(r"""(import\s*\(|from\s+)["'](https?:)?//""", text)
        assert not re.search(r"""url\(\s*["']?(https?:)?//""", text)
    # the API paths are relative, so the page works under any host and port
    assert "fetch('v1/chat/completions'" in assets["playground.js"].text


def test_the_renderer_bundle_is_served_when_built(dev_gateway: ThreadedServer) -> None:
    response = httpx.get(f"{dev_gateway.url}/playground/renderer/{playground.RENDERER_FILE}", timeout=10.0)
    if playground.renderer_built():
        assert response.status_code == 200 and "javascript" in response.headers["content-type"]
        assert "a2ui-surface" in response.text and "renderA2ui" in response.text
    else:
        assert response.status_code == 404


def test_without_the_renderer_its_url_is_a_clear_404(fake_router: FakeRouterServer, tmp_path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(playground, "RENDERER_DIR", tmp_path / "not-built")
    server = start_gateway(make_settings(fake_router.target))
    try:
        response = httpx.get(f"{server.url}/playground/renderer/{playground.RENDERER_FILE}", timeout=10.0)
        assert response.status_code == 404 and response.json()["error"]["type"] == "not_found_error"
        assert httpx.get(server.url + "/", timeout=10.0).status_code == 200  # the page itself still works
    finally:
        server.stop()


def test_the_playground_can_be_switched_off(fake_router: FakeRouterServer) -> None:
    server = start_gateway(make_settings(fake_router.target, gateway={"playground": False}))
    try:
        assert httpx.get(server.url + "/", timeout=10.0).status_code == 404
        assert httpx.get(server.url + "/playground/static/playground.js", timeout=10.0).status_code == 404
        assert httpx.get(server.url + "/stats", timeout=10.0).status_code == 200  # dev mode: the API stays
    finally:
        server.stop()


def test_a_stream_ends_with_its_route_and_timing(dev_gateway: ThreadedServer) -> None:
    headers, chunks = stream(dev_gateway, "python please", stream_options={"include_usage": True})
    assert headers["x-macaron-route-ms"] == f"{ROUTE_MS:.2f}"
    last = chunks[-2]  # the finish chunk; the usage chunk follows
    assert last["choices"][0]["finish_reason"] == "stop"
    summary = last["macaron"]
    assert summary["specialist"] == "code" and summary["route_reason"] == "classifier"
    assert summary["route_confidence"] == 0.75 and summary["adapter_version"] == "v1"
    assert summary["route_ms"] == ROUTE_MS
    assert isinstance(summary["ttft_ms"], float) and summary["ttft_ms"] >= 0
    # two completion tokens over two chunks: a rate from the second one on
    assert summary["tokens_per_s"] is None or summary["tokens_per_s"] > 0
    assert all("macaron" not in c for c in chunks[:-2])


def test_stats_need_the_key_and_count_what_happened(fresh_keyed_gateway: ThreadedServer) -> None:
    url = fresh_keyed_gateway.url + "/stats"
    missing = httpx.get(url, timeout=10.0)
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "invalid_api_key"
    bad = httpx.get(url, headers={"authorization": "Bearer mk-wrong"}, timeout=10.0)
    assert bad.status_code == 401
    empty = httpx.get(url, headers={"authorization": f"Bearer {API_KEY}"}, timeout=10.0).json()
    assert empty["routed_requests"] == 0 and empty["routing_ms"]["p50"] is None
    stream(fresh_keyed_gateway, "python please", stream_options={"include_usage": True})
    stream(fresh_keyed_gateway, "python again")
    stream(fresh_keyed_gateway, "hello there")
    stats = httpx.get(url, headers={"authorization": f"Bearer {API_KEY}"}, timeout=10.0).json()
    assert stats["routed_requests"] == 3
    assert stats["route_mix"]["code"] == {"requests": 2, "reasons": {"classifier": 2}, "share": 0.6667}
    assert stats["route_mix"]["chat"]["requests"] == 1
    assert stats["routing_ms"]["p50"] == ROUTE_MS and stats["routing_ms"]["p99"] == ROUTE_MS
    assert stats["routing_ms"]["samples"] == 3
    assert stats["time_to_route_ms"]["samples"] == 3 and stats["time_to_route_ms"]["p99"] > 0
    # the fake reports 12 prompt tokens with 3 cached on every answer
    assert stats["tokens"]["prompt"] == 36 and stats["tokens"]["cached"] == 9
    assert stats["tokens"]["cached_share"] == 0.25
    assert stats["versions"] == {"chat": {"v1": 1}, "code": {"v1": 2}}
    # polling does not use up the key's request budget: /stats is not counted as a request
    assert httpx.get(url, headers={"authorization": f"Bearer {API_KEY}"}, timeout=10.0).status_code == 200


@pytest.mark.parametrize(("samples", "q", "expected"), [
    ([], 0.5, None),
    ([7.0], 0.99, 7.0),
    ([1.0, 2.0, 3.0, 4.0], 0.5, 2.0),
    ([float(i) for i in range(1, 101)], 0.99, 99.0),
    ([float(i) for i in range(1, 101)], 0.5, 50.0),
    ([5.0, 1.0, 3.0], 0.5, 3.0),
])
def test_percentile_by_nearest_rank(samples: list[float], q: float, expected: float | None) -> None:
    assert percentile(samples, q) == expected
