"""One request through the gateway, the router, the code specialist and an engine: one trace holding
spans of all four hops, and metrics naming its specialist and version at the router and the gateway.

Gateway (uvicorn in a thread), router and specialist run in this process so that one in-memory
exporter sees every span; the engine is a real embedded engine (its hop's span is the
specialist's client span, which carries the engine URL, the adapter and the token counts).
"""

from __future__ import annotations

import contextlib

import httpx
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import generate_latest

from engine_api.servers import ThreadedServer
from macaron import telemetry
from macaron.specialist.server import SpecialistServer, build_pipelines
from macaron.store import MemoryStore

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def spans() -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    telemetry.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


async def test_one_trace_across_four_hops_and_metrics_by_version(routers, settings, spans) -> None:
    from macaron.gateway.app import create_app

    local = settings.model_copy(deep=True)
    pipeline = build_pipelines(local, ["code"])["code"]
    specialist = SpecialistServer(pipeline, "127.0.0.1", 0, serve_metrics=False)
    port = await specialist.start()
    local.router.pools.code = [f"127.0.0.1:{port}"]
    router, _, _ = await routers.start(settings=local)
    local.gateway.router_target = f"127.0.0.1:{router.port}"
    gateway = ThreadedServer(create_app(local, store=MemoryStore())).start(health_path="/healthz")
    try:
        spans.clear()
        async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as client:
            response = await client.post("/v1/chat/completions", json={
                "model": "macaron-code", "max_tokens": 3, "temperature": 0,
                "messages": [{"role": "user", "content": "write python code"}]})
            assert response.status_code == 200, response.text
            assert response.headers["x-macaron-adapter-version"] == "v1"
            assert response.headers["x-macaron-adapter"] == "code@v1"
            gateway_metrics = (await client.get("/metrics")).text
    finally:
        gateway.stop()
        await specialist.server.stop(0)
        with contextlib.suppress(Exception):
            await pipeline.engines.aclose()

    finished = {s.name: s for s in spans.get_finished_spans()}
    hops = ("gateway.chat_completions", "router.Generate", "specialist.Generate", "engine.generate")
    assert set(hops) <= set(finished), sorted(finished)
    assert len({finished[h].context.trace_id for h in hops}) == 1, "the hops are not in one trace"
    for parent, child in zip(hops, hops[1:]):  # each hop is a child of the one before
        assert finished[child].parent.span_id == finished[parent].context.span_id, (parent, child)
    r = finished["router.Generate"].attributes
    assert (r["specialist"], r["route.reason"], r["adapter.version"]) == ("code", "explicit", "v1")
    assert r["usage.completion_tokens"] > 0 and r["usage.prompt_tokens"] > 0
    e = finished["engine.generate"].attributes
    assert e["adapter.lora_path"] == "code@v1" and e["usage.completion_tokens"] == r["usage.completion_tokens"]
    assert finished["gateway.chat_completions"].attributes["adapter.version"] == "v1"

    router_metrics = generate_latest(router.metrics.registry).decode()
    assert 'macaron_router_version_requests_total{code="OK",specialist="code",version="v1"} 1.0' in router_metrics
    assert 'macaron_router_time_to_first_token_seconds_count{specialist="code",version="v1"} 1.0' in router_metrics
    assert 'macaron_router_version_decisions_total{reason="stable",specialist="code",version="v1"} 1.0' in router_metrics
    assert 'macaron_gateway_version_requests_total{specialist="code",status="200",version="v1"} 1.0' in gateway_metrics
