"""The caller's deadline on /generate (`x-macaron-timeout`, seconds): the embedded engine stops the request then.

SGLang has no per-request deadline (it ignores the header), so these run against our engine only.
The requests would decode for far longer than their deadlines: 1500 tokens (end of sequence ignored) take the
tiny model over a second on any CPU, the deadlines are 0.3 s; each test checks that the work stopped early.
"""

from __future__ import annotations

import asyncio
import json
from urllib.parse import urlsplit

import httpx
import pytest

from engine_api.conftest import EngineTarget
from engine_api.wire import TIMEOUT, decode, metric, wait_for_metric
from macaron.engine_client import AsyncEngineClient, EngineTimeoutError
from macaron.engine_client._exceptions import make_status_error

LONG = {"max_new_tokens": 1500, "temperature": 0.0, "ignore_eos": True}
RUNNING = "sglang:num_running_reqs"
HEADER = "x-macaron-timeout"
DEADLINE = "0.3"


@pytest.fixture
def embedded(engine: EngineTarget) -> EngineTarget:
    if not engine.embedded:
        pytest.skip("SGLang has no per-request deadline")
    return engine


async def test_a_request_past_its_deadline_is_answered_504_and_stopped(embedded: EngineTarget) -> None:
    aborted = await metric(embedded.url, "sglang:num_aborted_requests_total")
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        response = await http.post(embedded.url + "/generate", json={"text": "story", "sampling_params": LONG},
                                   headers={HEADER: DEADLINE})
    assert response.status_code == 504, response.text
    assert response.json()["code"] == 504 and HEADER in response.json()["message"]
    assert await wait_for_metric(embedded.url, RUNNING, lambda v: v == 0) == 0
    assert await metric(embedded.url, "sglang:num_aborted_requests_total") > aborted


async def test_a_stream_past_its_deadline_ends_with_an_abort_carrying_504(embedded: EngineTarget) -> None:
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        async with http.stream("POST", embedded.url + "/generate", headers={HEADER: DEADLINE},
                               json={"text": "story", "stream": True, "sampling_params": LONG}) as response:
            assert response.status_code == 200
            frames = [line[5:].strip() async for line in response.aiter_lines() if line.startswith("data:")]
    chunks, done = decode(frames)
    reason = chunks[-1]["meta_info"]["finish_reason"]
    assert done and reason["type"] == "abort" and reason["status_code"] == 504, reason
    assert chunks[-1]["meta_info"]["completion_tokens"] < LONG["max_new_tokens"]


async def test_a_client_that_vanishes_without_closing_leaves_no_work_running(embedded: EngineTarget) -> None:
    """The caller sends a stream request and never reads nor closes its connection (a frozen or partitioned
    peer): nothing tells the engine it left, yet the work stops at the deadline the request carried."""
    url = urlsplit(embedded.url)
    aborted = await metric(embedded.url, "sglang:num_aborted_requests_total")
    body = json.dumps({"text": "story", "stream": True, "sampling_params": LONG}).encode()
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    try:
        writer.write(b"POST /generate HTTP/1.1\r\nhost: engine\r\ncontent-type: application/json\r\n"
                     b"%s: %s\r\ncontent-length: %d\r\n\r\n%s" % (HEADER.encode(), DEADLINE.encode(), len(body), body))
        await writer.drain()
        # the connection stays open and unread from here on; the request ends as an abort (not finished: stopped)
        assert await wait_for_metric(embedded.url, "sglang:num_aborted_requests_total", lambda v: v > aborted,
                                     timeout=30.0) > aborted
        assert await wait_for_metric(embedded.url, RUNNING, lambda v: v == 0) == 0
        assert not reader.at_eof()  # still connected: the deadline, not a disconnect, stopped it
    finally:
        writer.close()


async def test_the_engine_client_sends_the_time_left_and_maps_504_to_a_timeout(embedded: EngineTarget) -> None:
    assert isinstance(make_status_error(504, {"message": "deadline"}), EngineTimeoutError)
    async with AsyncEngineClient(embedded.url, timeout=float(DEADLINE), max_retries=0) as client:
        with pytest.raises(EngineTimeoutError):
            await client.generate(text="story", sampling_params=LONG)
    assert await wait_for_metric(embedded.url, RUNNING, lambda v: v == 0) == 0


@pytest.mark.parametrize("value", ["0", "-3", "soon", "nan", "inf"])
async def test_a_bad_deadline_is_a_400(embedded: EngineTarget, value: str) -> None:
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        response = await http.post(embedded.url + "/generate", headers={HEADER: value},
                                   json={"text": "hi", "sampling_params": {"max_new_tokens": 2}})
    assert response.status_code == 400 and HEADER in response.json()["error"]["message"], response.text
