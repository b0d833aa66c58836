"""macaron.engine_client: typed results and errors, deadlines, aborts, retry before the first token.

Errors, deadlines and aborts run against the real engine; the retry rules need answers a
healthy engine does not give on cue (503 then success, a stream cut after one token), so a
small scripted stub server on loopback plays those.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from engine_api.conftest import EngineTarget
from engine_api.servers import ThreadedServer, free_port
from engine_api.wire import wait_for_metric
from macaron.engine_client import (
    AsyncEngineClient,
    EngineBadRequestError,
    EngineClientError,
    EngineOverloadedError,
    EngineTimeoutError,
    EngineUnavailableError,
    StreamChunk,
)

GREEDY = {"max_new_tokens": 12, "temperature": 0.0}
LONG = {"max_new_tokens": 1500, "temperature": 0.0, "ignore_eos": True}
RUNNING = "sglang:num_running_reqs"


# ---------------------------------------------------------------- against the engine


async def test_stream_chunks_carry_delta_and_cumulative_text(client: AsyncEngineClient) -> None:
    final = await client.generate(text="Hello", sampling_params=GREEDY, lora_path="chat")
    chunks: list[StreamChunk] = [c async for c in client.generate_stream(text="Hello", sampling_params=GREEDY, lora_path="chat")]
    assert "".join(c.delta for c in chunks) == final.text == chunks[-1].text
    assert [i for c in chunks for i in c.delta_output_ids] == final.output_ids == chunks[-1].output_ids
    assert chunks[-1].finished and not any(c.finished for c in chunks[:-1])
    assert chunks[-1].finish_reason is not None and chunks[-1].finish_reason.type == "length"


async def test_stream_chunks_carry_the_logprobs_of_their_new_tokens(client: AsyncEngineClient) -> None:
    logprobs = {"return_logprob": True, "top_logprobs_num": 2, "logprob_start_len": -1}
    whole = await client.generate(text="Hello", sampling_params=GREEDY, extra_body=logprobs)
    streamed = [lp async for c in client.generate_stream(text="Hello", sampling_params=GREEDY, extra_body=logprobs)
                for lp in c.delta_logprobs]
    assert [t.token_id for t in streamed] == whole.output_ids == [t.token_id for t in whole.meta_info.token_logprobs()]
    assert all(len(t.top) == 2 and t.top[0][0] == t.token_id for t in streamed)  # greedy: the best one was chosen


async def test_bad_request_raises_typed_error(client: AsyncEngineClient) -> None:
    with pytest.raises(EngineBadRequestError) as raised:
        await client.generate(text="a", lora_path="no-such-adapter")
    assert raised.value.status_code == 400 and "no-such-adapter" in raised.value.message
    with pytest.raises(EngineBadRequestError):
        async for _ in client.generate_stream(text="a", sampling_params={"max_new_tokens": -1}):
            pass
    with pytest.raises(EngineBadRequestError):
        await client.unload_lora_adapter("no-such-adapter")


async def test_unreachable_engine_raises_unavailable() -> None:
    async with AsyncEngineClient(f"http://127.0.0.1:{free_port()}", timeout=5, max_retries=1) as dead:
        with pytest.raises(EngineUnavailableError) as raised:
            await dead.generate(text="a")
        assert raised.value.retryable and raised.value.status_code is None
        assert await dead.health() is False


async def test_deadline_raises_timeout_and_aborts(engine: EngineTarget, client: AsyncEngineClient) -> None:
    with pytest.raises(EngineTimeoutError):
        await client.generate(text="story", sampling_params=LONG, timeout=0.3)
    assert await wait_for_metric(engine.url, RUNNING, lambda v: v == 0, timeout=3.0) == 0
    with pytest.raises(EngineTimeoutError):
        async for _ in client.generate_stream(text="story", sampling_params=LONG, timeout=0.3):
            pass
    assert await wait_for_metric(engine.url, RUNNING, lambda v: v == 0, timeout=3.0) == 0


async def test_leaving_a_stream_early_aborts_it(engine: EngineTarget, client: AsyncEngineClient) -> None:
    async with client.generate_stream(text="story", sampling_params=LONG) as stream:
        async for _ in stream:
            break
    assert await wait_for_metric(engine.url, RUNNING, lambda v: v == 0, timeout=3.0) == 0


async def test_cancelling_the_caller_aborts_the_request(engine: EngineTarget, client: AsyncEngineClient) -> None:
    async def consume() -> None:
        async for _ in client.generate_stream(text="story", sampling_params=LONG):
            pass

    task = asyncio.create_task(consume())
    assert await wait_for_metric(engine.url, RUNNING, lambda v: v >= 1) >= 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await wait_for_metric(engine.url, RUNNING, lambda v: v == 0, timeout=3.0) == 0


# ---------------------------------------------------------------- retry rules (scripted stub)


class Script:
    """What the stub answers to each /generate, in order, and what it was sent."""

    def __init__(self) -> None:
        self.reset()

    def reset(self, *plan: str) -> None:
        self.plan = list(plan)
        self.calls = 0
        self.aborted: list[str] = []


def _chunk(rid: str, ids: list[int], finish: dict | None = None) -> bytes:
    meta = {"id": rid, "finish_reason": finish, "prompt_tokens": 1, "completion_tokens": len(ids), "cached_tokens": 0}
    return b"data: " + json.dumps({"text": "x" * len(ids), "output_ids": ids, "meta_info": meta}).encode() + b"\n\n"


def stub_app(script: Script) -> Starlette:
    async def generate(request: Request) -> Response:
        body = await request.json()
        step = script.plan[script.calls] if script.calls < len(script.plan) else "ok"
        script.calls += 1
        rid = body["rid"]
        if step == "503":
            return JSONResponse({"object": "error", "message": "The request queue is full.", "code": 503}, 503)
        if step == "abort-503":  # SGLang's streamed refusal
            return StreamingResponse(iter([_chunk(rid, [], {"type": "abort", "status_code": 503,
                                                            "message": "The request queue is full."}),
                                           b"data: [DONE]\n\n"]), media_type="text/event-stream")
        if step == "cut":
            async def cut() -> AsyncIterator[bytes]:
                yield _chunk(rid, [7])
                await asyncio.sleep(0.05)
                raise RuntimeError("connection lost after one token (scripted)")
            return StreamingResponse(cut(), media_type="text/event-stream")
        if step == "separators":  # JSON carries U+2028, U+2029 and U+0085 raw (SGLang's orjson does); CRLF ends lines
            meta = {"id": rid, "finish_reason": {"type": "length", "length": 2}, "prompt_tokens": 1,
                    "completion_tokens": 2, "cached_tokens": 0}
            event = json.dumps({"text": "a\u2028data: b\u2029c\x85d", "output_ids": [7, 8], "meta_info": meta},
                               ensure_ascii=False).encode()
            return StreamingResponse(iter([b"data: " + event[:9], event[9:] + b"\r", b"\n\r\ndata: [DONE]\r\n\r\n"]),
                                     media_type="text/event-stream")
        if step == "garbage":
            return StreamingResponse(iter([b"data: <<not json>>\n\n"]), media_type="text/event-stream")
        if not body.get("stream"):
            return JSONResponse({"text": "xy", "output_ids": [7, 8], "meta_info": {
                "id": rid, "finish_reason": {"type": "length", "length": 2}, "prompt_tokens": 1,
                "completion_tokens": 2, "cached_tokens": 0}})
        return StreamingResponse(iter([_chunk(rid, [7]), _chunk(rid, [7, 8], {"type": "length", "length": 2}),
                                       b"data: [DONE]\n\n"]), media_type="text/event-stream")

    async def abort(request: Request) -> Response:
        script.aborted.append((await request.json())["rid"])
        return Response(status_code=200)

    return Starlette(routes=[
        Route("/generate", generate, methods=["POST"]),
        Route("/abort_request", abort, methods=["POST"]),
        Route("/health", lambda _: Response(status_code=200)),
    ])


@pytest.fixture(scope="module")
def stub() -> Iterator[tuple[Script, str]]:
    script = Script()
    server = ThreadedServer(stub_app(script)).start()
    try:
        yield script, server.url
    finally:
        server.stop()


@pytest.fixture
def script(stub: tuple[Script, str]) -> Script:
    stub[0].reset()
    return stub[0]


async def test_retries_503_before_the_first_token(stub: tuple[Script, str], script: Script) -> None:
    script.reset("503", "abort-503", "ok")
    async with AsyncEngineClient(stub[1], timeout=10, max_retries=2, incremental_streaming=False) as c:
        chunks = [chunk async for chunk in c.generate_stream(text="a")]
    assert script.calls == 3 and chunks[-1].output_ids == [7, 8]

    script.reset("503", "ok")
    async with AsyncEngineClient(stub[1], timeout=10, max_retries=2) as c:
        assert (await c.generate(text="a")).output_ids == [7, 8]
    assert script.calls == 2


async def test_gives_up_after_max_retries(stub: tuple[Script, str], script: Script) -> None:
    script.reset("503", "503", "503")
    async with AsyncEngineClient(stub[1], timeout=10, max_retries=1) as c:
        with pytest.raises(EngineOverloadedError) as raised:
            await c.generate(text="a")
    assert script.calls == 2 and raised.value.status_code == 503 and raised.value.retryable


async def test_never_retries_after_a_token(stub: tuple[Script, str], script: Script) -> None:
    script.reset("cut", "ok")
    received: list[StreamChunk] = []
    async with AsyncEngineClient(stub[1], timeout=10, max_retries=3, incremental_streaming=False) as c:
        stream = c.generate_stream(text="a")
        with pytest.raises(EngineUnavailableError):
            async for chunk in stream:
                received.append(chunk)
        await asyncio.sleep(0.1)
    assert script.calls == 1, "a stream that delivered a token must not be sent again"
    assert [c.output_ids for c in received] == [[7]]
    assert script.aborted == [stream.rid], "the engine is told to drop the broken request"


async def test_retry_on_a_real_full_queue(small_engine: ThreadedServer) -> None:
    """Against the small engine (1 running + 1 queued): a third request is refused, then retried."""
    sent = 0

    async def count(request: httpx.Request) -> None:
        nonlocal sent
        sent += request.url.path == "/generate"

    async with AsyncEngineClient(small_engine.url, timeout=30, max_retries=0) as plain, \
            httpx.AsyncClient(base_url=small_engine.url, event_hooks={"request": [count]}) as http, \
            AsyncEngineClient(small_engine.url, timeout=30, max_retries=8, http_client=http) as patient:
        blockers = [asyncio.create_task(plain.generate(text="block", sampling_params=LONG))]
        await wait_for_metric(small_engine.url, RUNNING, lambda v: v >= 1)
        blockers.append(asyncio.create_task(plain.generate(text="block", sampling_params=LONG)))
        await wait_for_metric(small_engine.url, "sglang:num_queue_reqs", lambda v: v >= 1)
        waiting = asyncio.create_task(patient.generate(text="Hello", sampling_params=GREEDY))
        while sent < 1:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # the first attempt is refused at once
        await http.post("/abort_request", json={"abort_all": True}, timeout=5)  # frees the queue
        result = await waiting
        blocked = await asyncio.gather(*blockers)
    assert all(b.finish_reason is not None and b.finish_reason.type == "abort" for b in blocked)
    assert result.meta_info.completion_tokens == 12
    assert sent > 1, "the first attempt met a full queue and was retried"


async def test_a_stream_event_is_cut_only_where_sse_ends_a_line(stub: tuple[Script, str], script: Script) -> None:
    """Generated text may hold U+2028, U+2029 or U+0085, which JSON leaves unescaped: the event is one line all the
    same (splitting there read half an event as JSON, and the request failed with a raw JSONDecodeError)."""
    script.reset("separators")
    async with AsyncEngineClient(stub[1], timeout=10, incremental_streaming=False) as c:
        chunks = [chunk async for chunk in c.generate_stream(text="a")]
    assert [c.text for c in chunks] == ["a\u2028data: b\u2029c\x85d"] and chunks[-1].output_ids == [7, 8]


async def test_an_event_that_is_not_json_is_a_clear_engine_error(stub: tuple[Script, str], script: Script) -> None:
    script.reset("garbage")
    async with AsyncEngineClient(stub[1], timeout=10, incremental_streaming=False) as c:
        with pytest.raises(EngineClientError, match="not JSON") as raised:
            [chunk async for chunk in c.generate_stream(text="a")]
    assert raised.value.status_code == 502
