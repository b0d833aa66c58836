"""The engine client carries the caller's request id and W3C trace context to the engine."""

from __future__ import annotations

import asyncio
import json

from macaron import telemetry
from macaron.engine_client import AsyncEngineClient


async def _recording_server(seen: list[dict[str, str]]) -> asyncio.base_events.Server:
    """A loopback HTTP/1.1 server that records request headers and answers one SGLang /generate body."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        headers = dict(line.split(": ", 1) for line in head.split("\r\n")[1:] if ": " in line)
        headers = {k.lower(): v for k, v in headers.items()}
        await reader.readexactly(int(headers.get("content-length", "0")))
        seen.append(headers)
        body = json.dumps({
            "text": "ok", "output_ids": [1],
            "meta_info": {"id": "r1", "finish_reason": {"type": "length", "length": 1}, "prompt_tokens": 1,
                          "completion_tokens": 1, "cached_tokens": 0, "e2e_latency": 0.01},
        }).encode()
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def test_request_id_and_traceparent_reach_the_engine() -> None:
    seen: list[dict[str, str]] = []
    server = await _recording_server(seen)
    port = server.sockets[0].getsockname()[1]
    telemetry.setup_tracing("test")
    try:
        async with AsyncEngineClient(f"http://127.0.0.1:{port}", timeout=10, max_retries=0) as client:
            telemetry.bind_request_id("req-propagated-1")
            with telemetry.tracer(__name__).start_as_current_span("hop") as span:
                await client.generate(text="hi", sampling_params={"max_new_tokens": 1})
                trace_id = format(span.get_span_context().trace_id, "032x")
    finally:
        server.close()
        await server.wait_closed()
    assert seen and seen[0]["x-request-id"] == "req-propagated-1"
    assert seen[0]["traceparent"].split("-")[1] == trace_id


async def test_generate_carries_the_time_left_of_its_deadline() -> None:
    """`x-macaron-timeout`: the seconds left of the call's deadline when the request leaves (the engine stops the
    work then); other calls do not carry it."""
    seen: list[dict[str, str]] = []
    server = await _recording_server(seen)
    port = server.sockets[0].getsockname()[1]
    try:
        async with AsyncEngineClient(f"http://127.0.0.1:{port}", timeout=600, max_retries=0) as client:
            await client.generate(text="hi", sampling_params={"max_new_tokens": 1}, timeout=7.5)
    finally:
        server.close()
        await server.wait_closed()
    assert 0 < float(seen[0]["x-macaron-timeout"]) <= 7.5
