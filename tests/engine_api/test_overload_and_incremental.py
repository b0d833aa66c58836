"""The small in-process engine (1 running, 1 queued, incremental streaming): overload and increments."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from engine_api.servers import ThreadedServer
from engine_api.wire import TIMEOUT, decode, stream_generate, wait_for_metric
from macaron.engine_client import AsyncEngineClient, EngineOverloadedError

GREEDY = {"max_new_tokens": 12, "temperature": 0.0}
LONG = {"max_new_tokens": 1500, "temperature": 0.0, "ignore_eos": True}


async def test_full_queue_answers_503_at_once_and_recovers(small_engine: ThreadedServer) -> None:
    url = small_engine.url
    async with AsyncEngineClient(url, timeout=30, max_retries=0) as client, httpx.AsyncClient(timeout=TIMEOUT) as http:
        running = asyncio.create_task(client.generate(text="block", sampling_params=LONG))
        await wait_for_metric(url, "sglang:num_running_reqs", lambda v: v >= 1)
        queued = asyncio.create_task(client.generate(text="block", sampling_params=LONG))
        await wait_for_metric(url, "sglang:num_queue_reqs", lambda v: v >= 1)

        started = time.monotonic()
        refused = await http.post(url + "/generate", json={"text": "one more", "sampling_params": GREEDY})
        assert time.monotonic() - started < 2.0, "overload must be answered, not queued behind the work"
        assert refused.status_code == 503
        body = refused.json()
        assert body["code"] == 503 and "max_queued_requests" in body["message"]

        status, frames = await stream_generate(url, {"text": "one more", "sampling_params": GREEDY})
        assert status == 503, "a refused stream is refused before it starts"
        with pytest.raises(EngineOverloadedError) as raised:
            await client.generate(text="one more", sampling_params=GREEDY)
        assert raised.value.status_code == 503 and raised.value.retryable

        await http.post(url + "/abort_request", json={"abort_all": True})
        finished = await asyncio.gather(running, queued)
        assert all(r.finish_reason is not None and r.finish_reason.type == "abort" for r in finished)
        again = await client.generate(text="one more", sampling_params=GREEDY)
        assert again.meta_info.completion_tokens == 12


async def test_incremental_stream_sends_only_new_text(small_engine: ThreadedServer) -> None:
    url = small_engine.url
    async with AsyncEngineClient(url, timeout=30) as client:
        info = await client.server_info()
        assert info.incremental_streaming_output is True
        final = await client.generate(text="Hello", sampling_params=GREEDY, lora_path="ui")
        status, frames = await stream_generate(url, {"text": "Hello", "sampling_params": GREEDY, "lora_path": "ui"})
        chunks, done = decode(frames)
        assert status == 200 and done and len(chunks) > 1
        assert "".join(c["text"] for c in chunks) == final.text
        assert [i for c in chunks for i in c["output_ids"]] == final.output_ids
        assert chunks[-1]["meta_info"]["completion_tokens"] == 12

        typed = [c async for c in client.generate_stream(text="Hello", sampling_params=GREEDY, lora_path="ui")]
        assert typed[-1].text == final.text and typed[-1].output_ids == final.output_ids
        assert "".join(c.delta for c in typed) == final.text
