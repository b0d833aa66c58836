"""Trace context and request ids survive a hop through headers or gRPC metadata."""

from __future__ import annotations

import asyncio
import logging

from opentelemetry import trace

from macaron.telemetry import (
    REQUEST_ID_KEY,
    RequestIdLogFilter,
    bind_request_id,
    clean_request_id,
    extract,
    inject,
    metadata_to_dict,
    setup_tracing,
    tracer,
)


def test_trace_context_round_trips() -> None:
    setup_tracing("test")
    with tracer("test").start_as_current_span("hop") as span:
        carrier = inject({})
        trace_id = span.get_span_context().trace_id
    assert carrier["traceparent"].startswith("00-")
    ctx = extract({k.upper(): v for k, v in carrier.items()})
    assert trace.get_current_span(ctx).get_span_context().trace_id == trace_id


async def test_request_id_is_per_task_and_sanitised() -> None:
    async def handle(value: str | None) -> str:
        rid = bind_request_id(value)
        await asyncio.sleep(0)
        carrier = inject({})
        assert carrier[REQUEST_ID_KEY] == rid
        return rid

    a, b = await asyncio.gather(handle("req-a"), handle("req-b"))
    assert (a, b) == ("req-a", "req-b")
    assert clean_request_id("bad id with spaces") != "bad id with spaces"
    assert len(clean_request_id("x" * 500)) == 32
    assert clean_request_id(None)


def test_metadata_and_log_records() -> None:
    assert metadata_to_dict([("X-Request-Id", "r1"), ("bin-bin", b"\x00")]) == {"x-request-id": "r1"}
    bind_request_id("r-log")
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "msg", None, None)
    RequestIdLogFilter().filter(record)
    assert record.request_id == "r-log"
