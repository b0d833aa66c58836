"""The base-group contract: SGLang's native API as the project uses it.

Runs against the embedded engine by default and against any server in $MACARON_ENGINE_URL
(a real SGLang included), so one suite pins what both must answer. Cases that only hold for
the embedded engine say so and are skipped elsewhere.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
import pytest

from engine_api.conftest import EngineTarget
from engine_api.wire import TIMEOUT, decode, metric, stream_generate, wait_for_metric
from macaron.engine_client import AsyncEngineClient, EngineBadRequestError, GenerateResult

GREEDY = {"max_new_tokens": 12, "temperature": 0.0}
LONG = {"max_new_tokens": 1500, "temperature": 0.0, "ignore_eos": True}
"""Seconds of work on the tiny model; long enough to be aborted while it runs."""
RUNNING = "sglang:num_running_reqs"


async def post(url: str, path: str, body: Any) -> httpx.Response:
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        if isinstance(body, bytes):
            return await http.post(url + path, content=body, headers={"content-type": "application/json"})
        return await http.post(url + path, json=body)


async def get(url: str, path: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        return await http.get(url + path)


# ---------------------------------------------------------------- generation


async def test_generate_answers_sglang_shape(engine: EngineTarget) -> None:
    rid = uuid.uuid4().hex
    response = await post(engine.url, "/generate", {"text": "Hello", "rid": rid, "sampling_params": GREEDY})
    assert response.status_code == 200, response.text
    body = response.json()
    assert isinstance(body["text"], str) and body["text"]
    assert len(body["output_ids"]) == 12 and all(isinstance(i, int) for i in body["output_ids"])
    meta = body["meta_info"]
    assert meta["id"] == rid
    assert meta["finish_reason"] == {"type": "length", "length": 12}
    assert meta["prompt_tokens"] > 0 and meta["completion_tokens"] == 12
    assert isinstance(meta["cached_tokens"], int) and isinstance(meta["e2e_latency"], float)
    typed = GenerateResult.model_validate(body)
    assert typed.meta_info.finish_reason is not None and typed.meta_info.finish_reason.length == 12


async def test_logprobs_in_sglang_shape_whole_and_streamed(engine: EngineTarget) -> None:
    """return_logprob / top_logprobs_num: (logprob, token id, text) per output token, the same streamed."""
    body = {"text": "Hello", "sampling_params": GREEDY, "return_logprob": True, "top_logprobs_num": 3,
            "logprob_start_len": -1, "return_text_in_logprobs": True}
    response = await post(engine.url, "/generate", body)
    assert response.status_code == 200, response.text
    out = response.json()
    meta = out["meta_info"]
    tokens, tops = meta["output_token_logprobs"], meta["output_top_logprobs"]
    assert [t[1] for t in tokens] == out["output_ids"]
    assert len(tops) == len(tokens) == 12
    for (logprob, token, text), top in zip(tokens, tops):
        assert logprob <= 0.0 and isinstance(text, str)
        assert len(top) == 3 and [e[0] for e in top] == sorted((e[0] for e in top), reverse=True)
        assert top[0][1] == token and abs(top[0][0] - logprob) < 1e-5  # greedy: the chosen token is the best one
    status, frames = await stream_generate(engine.url, body)
    assert status == 200, frames
    streamed = [json.loads(f) for f in frames if f != "[DONE]"]
    last = streamed[-1]["meta_info"]
    seen: list[Any] = []
    for chunk in streamed:  # cumulative or incremental, the tokens add up to the whole answer's
        part = chunk["meta_info"]["output_token_logprobs"]
        seen = part if len(part) == chunk["meta_info"]["completion_tokens"] else seen + part
    assert [t[1] for t in seen] == out["output_ids"]
    assert [round(t[0], 4) for t in seen] == [round(t[0], 4) for t in tokens]
    assert last["completion_tokens"] == 12


async def test_generate_accepts_router_fields(engine: EngineTarget) -> None:
    """The extra top-level fields smg adds, nulls in sampling_params, input_ids prompts."""
    body = {
        "input_ids": [5, 6, 7],
        "sampling_params": {"max_new_tokens": 4, "temperature": 0.0, "top_p": None, "stop": None},
        "model": "whatever", "log_metrics": True, "return_text_in_logprobs": False, "background": False,
        "no_logs": False, "return_bytes": False, "return_entropy": False, "return_logprob": False,
        "custom_logit_processor": None, "bootstrap_host": None, "bootstrap_room": None, "session_params": None,
        "some_future_field": {"ignored": True},
    }
    response = await post(engine.url, "/generate", body)
    assert response.status_code == 200, response.text
    assert response.json()["meta_info"]["prompt_tokens"] == 3


async def test_stream_is_sse_with_cumulative_text_and_done(engine: EngineTarget, client: AsyncEngineClient) -> None:
    info = await client.server_info()
    rid = uuid.uuid4().hex
    status, frames = await stream_generate(engine.url, {"text": "Hello", "rid": rid, "sampling_params": GREEDY})
    assert status == 200
    chunks, done = decode(frames)
    assert done, f"stream must end with data: [DONE], got {frames[-1:]}"
    assert chunks and all({"text", "output_ids", "meta_info"} <= set(c) for c in chunks)
    assert all(c["meta_info"]["id"] == rid for c in chunks)
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    final = (await client.generate(text="Hello", sampling_params=GREEDY)).text
    if info.incremental_streaming_output:
        assert "".join(c["text"] for c in chunks) == final
    else:
        texts = [c["text"] for c in chunks]
        assert all(b.startswith(a) for a, b in zip(texts, texts[1:])), "SGLang streams cumulative text"
        assert texts[-1] == final and len(chunks[-1]["output_ids"]) == 12


async def test_each_adapter_changes_greedy_text(engine: EngineTarget, client: AsyncEngineClient) -> None:
    base = (await client.generate(text="Hello there", sampling_params=GREEDY)).output_ids
    for name in engine.adapters:
        adapted = (await client.generate(text="Hello there", sampling_params=GREEDY, lora_path=name)).output_ids
        assert adapted != base, f"adapter {name} gives the base model's greedy tokens"


# ---------------------------------------------------------------- aborts


async def test_abort_request_stops_a_running_request(engine: EngineTarget) -> None:
    rid = uuid.uuid4().hex
    task = asyncio.create_task(post(engine.url, "/generate", {"text": "story", "rid": rid, "sampling_params": LONG}))
    assert await wait_for_metric(engine.url, RUNNING, lambda v: v >= 1) >= 1
    assert (await post(engine.url, "/abort_request", {"rid": rid})).status_code == 200
    response = await asyncio.wait_for(task, 10)
    meta = response.json()["meta_info"]
    assert meta["finish_reason"]["type"] == "abort"
    assert meta["completion_tokens"] < LONG["max_new_tokens"]
    assert await wait_for_metric(engine.url, RUNNING, lambda v: v == 0) == 0


async def test_client_disconnect_stops_compute(engine: EngineTarget) -> None:
    aborted = await metric(engine.url, "sglang:num_aborted_requests_total")
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        body = {"text": "story", "stream": True, "sampling_params": LONG}
        async with http.stream("POST", engine.url + "/generate", json=body) as response:
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    break  # one chunk, then hang up
    assert await wait_for_metric(engine.url, RUNNING, lambda v: v == 0, timeout=3.0) == 0
    assert await wait_for_metric(engine.url, "sglang:num_aborted_requests_total", lambda v: v > aborted) > aborted


# ---------------------------------------------------------------- adapters at run time


async def test_load_use_unload_adapter_at_run_time(engine: EngineTarget, client: AsyncEngineClient, adapter_copy) -> None:
    name = f"code@v2-{uuid.uuid4().hex[:6]}"
    loaded = await client.load_lora_adapter(name, str(adapter_copy))
    assert loaded.success and name in (loaded.loaded_adapters or {})
    assert name in [card.id for card in await client.list_models()]
    again = await post(engine.url, "/load_lora_adapter", {"lora_name": name, "lora_path": str(adapter_copy)})
    assert again.status_code == 400 and again.json()["success"] is False and again.json()["error_message"]

    v2 = await client.generate(text="def add(a, b):", sampling_params=GREEDY, lora_path=name)
    if engine.process is not None:  # our copy of the code adapter: same weights, same tokens
        v1 = await client.generate(text="def add(a, b):", sampling_params=GREEDY, lora_path="code")
        assert v2.output_ids == v1.output_ids

    unloaded = await client.unload_lora_adapter(name)
    assert unloaded.success and name not in (unloaded.loaded_adapters or {})
    with pytest.raises(EngineBadRequestError) as refused:
        await client.generate(text="def add(a, b):", sampling_params=GREEDY, lora_path=name)
    assert refused.value.status_code == 400


async def test_adapter_commands_refuse_bad_input(engine: EngineTarget, tmp_path) -> None:
    unknown = await post(engine.url, "/unload_lora_adapter", {"lora_name": "no-such-adapter"})
    assert unknown.status_code == 400 and unknown.json()["success"] is False
    missing = await post(engine.url, "/load_lora_adapter", {"lora_name": "x", "lora_path": str(tmp_path / "none")})
    assert missing.status_code == 400 and missing.json()["error_message"]
    malformed = await post(engine.url, "/load_lora_adapter", {"lora_name": "x"})
    assert malformed.status_code == 400


# ---------------------------------------------------------------- information


async def test_server_info_lists_adapters_and_bytes(engine: EngineTarget) -> None:
    if not engine.embedded:
        pytest.skip("memory accounting per adapter is the embedded engine's")
    for path in ("/get_server_info", "/server_info"):
        info = (await get(engine.url, path)).json()
        assert set(engine.adapters) <= set(info["loaded_adapters"])
        memory = info["memory_usage"]
        assert memory["base_weight_bytes"] > 0 and memory["kv_cache_bytes"] > 0
        assert all(memory["adapter_bytes"][name] > 0 for name in engine.adapters)
        # every kind apart: host copies, the slot pool (0 on CPU: slots read the host copies), and
        # what the pool would hold on an accelerator (slots x largest rank x every module)
        assert memory["adapter_host_bytes"] == sum(memory["adapter_bytes"].values())
        assert memory["adapter_pool_bytes"] == 0 and memory["device"] == "cpu"
        assert memory["adapter_pool_bytes_on_accelerator"] > 0
        assert memory["total_bytes"] == (
            memory["base_weight_bytes"] + memory["adapter_host_bytes"] + memory["adapter_pool_bytes"] + memory["kv_cache_bytes"]
            + memory["kv_copy_bytes"] + memory["packed_head_copy_bytes"]
        )
        assert memory["kv_copy_max_bytes"] > 0  # long-context rows' contiguous K/V copies: their cap
        assert info["model_path"] and info["incremental_streaming_output"] is False
        # SGLang's scheduler info, merged in at the top level: the KV pool's real size, what routers size a cache by
        loads = (await get(engine.url, "/v1/loads")).json()["loads"][0]
        assert info["max_total_num_tokens"] == loads["num_total_tokens"] > 0
        if engine.process is not None:
            assert info["max_running_requests"] == 8, "set by the YAML --config file"


async def test_model_info_and_models(engine: EngineTarget) -> None:
    for path in ("/model_info", "/get_model_info"):
        info = (await get(engine.url, path)).json()
        assert info["model_path"] and info["is_generation"] is True
    cards = (await get(engine.url, "/v1/models")).json()
    assert cards["object"] == "list"
    base, *adapters = cards["data"]
    assert base["parent"] is None and base["max_model_len"] > 0
    assert set(engine.adapters) <= {card["id"] for card in adapters}
    assert all(card["parent"] == base["id"] for card in adapters)


async def test_health_and_metrics(engine: EngineTarget) -> None:
    assert (await get(engine.url, "/health")).status_code == 200
    assert (await get(engine.url, "/health_generate")).status_code == 200
    text = (await get(engine.url, "/metrics")).text
    for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage",
                 "sglang:prompt_tokens_total", "sglang:generation_tokens_total",
                 "sglang:time_to_first_token_seconds", "sglang:e2e_request_latency_seconds"):
        assert name in text, f"/metrics lacks {name}"
    assert 'model_name="' in text


async def test_non_streaming_requests_record_the_real_time_to_first_token(engine: EngineTarget) -> None:
    """TTFT is stamped on the request when its first token is sampled, not when its only (final)
    output arrives: for a 40-token non-streaming request it is well under the whole latency, and
    the inter-token latency is not zero."""
    if not engine.embedded:
        pytest.skip("the embedded engine's own metrics")
    names = ("sglang:time_to_first_token_seconds_sum", "sglang:e2e_request_latency_seconds_sum",
             "sglang:e2e_request_latency_seconds_count", "sglang:inter_token_latency_seconds_sum")
    before = [await metric(engine.url, n) for n in names]
    body = {"text": "Hello there", "sampling_params": {"max_new_tokens": 40, "ignore_eos": True, "temperature": 0}}
    assert (await post(engine.url, "/generate", body)).status_code == 200
    await wait_for_metric(engine.url, names[2], lambda v: v > before[2])
    ttft, e2e, _, itl = [await metric(engine.url, n) - b for n, b in zip(names, before)]
    assert 0 < ttft < 0.9 * e2e
    assert itl > 0


# ---------------------------------------------------------------- bad input


def _bad_inputs(context_length: int) -> list[tuple[str, Any]]:
    return [
        ("malformed JSON", b'{"text": "a",'),
        ("body not an object", [1, 2]),
        ("text of the wrong type", {"text": 5}),
        ("stream of the wrong type", {"text": "a", "stream": "yes"}),
        ("temperature of the wrong type", {"text": "a", "sampling_params": {"temperature": "hot"}}),
        ("unknown sampling field", {"text": "a", "sampling_params": {"max_tokens": 5}}),
        ("no prompt", {"sampling_params": {"max_new_tokens": 2}}),
        ("unknown adapter", {"text": "a", "lora_path": "no-such-adapter"}),
        ("negative max_new_tokens", {"text": "a", "sampling_params": {"max_new_tokens": -1}}),
        ("huge max_new_tokens", {"text": "a", "sampling_params": {"max_new_tokens": 10**9}}),
        ("top_p out of range", {"text": "a", "sampling_params": {"top_p": 0.0}}),
        ("two constraints", {"text": "a", "sampling_params": {"regex": "[a-z]+", "json_schema": '{"type": "object"}'}}),
        ("prompt over the context length", {"input_ids": [5] * (context_length + 10)}),
        ("token id outside the vocabulary", {"input_ids": [10**7]}),
    ]


EMBEDDED_ONLY_BAD_INPUTS: list[tuple[str, Any]] = [
    ("empty prompt", {"text": ""}),
    ("zero max_new_tokens", {"text": "a", "sampling_params": {"max_new_tokens": 0}}),
    ("prompt logprobs asked for", {"text": "a", "return_logprob": True, "logprob_start_len": 0}),
    ("logprobs of chosen token ids", {"text": "a", "return_logprob": True, "token_ids_logprob": [1, 2]}),
    ("negative top_logprobs_num", {"text": "a", "return_logprob": True, "top_logprobs_num": -1}),
    ("a batch of prompts", {"text": ["a", "b"]}),
    ("two prompts at once", {"text": "a", "input_ids": [1]}),
]


async def test_bad_input_is_400_and_the_server_keeps_serving(engine: EngineTarget, client: AsyncEngineClient) -> None:
    context_length = (await get(engine.url, "/v1/models")).json()["data"][0]["max_model_len"]
    cases = _bad_inputs(context_length) + (EMBEDDED_ONLY_BAD_INPUTS if engine.embedded else [])
    failures = []
    for label, body in cases:
        response = await post(engine.url, "/generate", body)
        if response.status_code != 400:
            failures.append(f"{label}: {response.status_code} {response.text[:200]}")
            continue
        payload = response.json()
        message = payload.get("error") if isinstance(payload.get("error"), str) else (
            (payload.get("error") or {}).get("message") or payload.get("message"))
        if not message:
            failures.append(f"{label}: 400 without a message: {payload}")
    assert not failures, "\n".join(failures)
    assert (await client.generate(text="still here", sampling_params=GREEDY)).meta_info.completion_tokens == 12
    assert (await get(engine.url, "/health")).status_code == 200


async def test_streaming_bad_input_is_refused_before_the_stream(engine: EngineTarget) -> None:
    status, frames = await stream_generate(engine.url, {"text": "a", "lora_path": "no-such-adapter"})
    if engine.embedded:
        assert status == 400 and "no-such-adapter" in json.loads(frames[0])["error"]["message"]
    else:  # SGLang validates inside the stream: 200, an error frame, then [DONE]
        assert status == 400 or any('"error"' in frame for frame in frames), frames
