"""The REST gateway over a fake router: OpenAI shapes (through the official client), errors, auth, SSE."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from engine_api.servers import ThreadedServer
from macaron.v1 import common_pb2 as pb
from sdk.fake_router import FakeRouterServer

from .conftest import API_KEY, LIMITED_KEY, make_settings

HI = [{"role": "user", "content": "hi"}]


def oai(server: ThreadedServer, key: str = "unused", **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0, timeout=20.0, **kw)


def post(server: ThreadedServer, body: object, headers: dict[str, str] | None = None, **kw) -> httpx.Response:
    return httpx.post(server.url + "/v1/chat/completions", json=body, headers=headers or {}, timeout=20.0, **kw)


def test_completion_in_openai_shape_with_route_headers(dev_gateway: ThreadedServer, fake: FakeRouterServer) -> None:
    raw = oai(dev_gateway).chat.completions.with_raw_response.create(
        model="macaron-auto", messages=HI, max_completion_tokens=9, temperature=0.2, seed=1, stop="\n",
        extra_headers={"x-request-id": "req-abc", "x-session-id": "sess-1"},
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == "Hello world"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.model == "macaron-chat" and completion.object == "chat.completion"
    assert completion.usage.prompt_tokens == 12 and completion.usage.completion_tokens == 2
    assert completion.usage.total_tokens == 14 and completion.usage.prompt_tokens_details.cached_tokens == 3
    assert raw.headers["x-request-id"] == "req-abc"
    assert raw.headers["x-macaron-specialist"] == "chat" and raw.headers["x-macaron-route-reason"] == "classifier"
    assert raw.headers["x-macaron-adapter"] == "chat@v1"
    call = fake.servicer.calls[-1]
    assert call.metadata["x-request-id"] == "req-abc" and call.request.request_id == "req-abc"
    assert call.request.session_id == "sess-1"
    assert call.request.sampling.max_new_tokens == 9 and list(call.request.sampling.stop) == ["\n"]
    assert call.metadata["authorization"] == "Bearer unused"  # the caller's key goes on to the router


def test_forced_model_and_user_as_session(dev_gateway: ThreadedServer, fake: FakeRouterServer) -> None:
    completion = oai(dev_gateway).chat.completions.create(model="macaron-ui", messages=HI, user="alice")
    assert completion.model == "macaron-ui"
    request = fake.servicer.calls[-1].request
    assert request.specialist == 4 and request.session_id == "alice"


def test_named_tool_choice_response_format_and_sampling_extras_reach_the_router(dev_gateway: ThreadedServer,
                                                                              fake: FakeRouterServer) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    oai(dev_gateway).chat.completions.create(
        model="macaron-agent", messages=HI, tools=tools, tool_choice={"type": "function", "function": {"name": "get_weather"}},
        extra_body={"top_k": 20, "min_p": 0.1, "repetition_penalty": 1.2, "min_tokens": 2},
    )
    sent = fake.servicer.calls[-1].request
    assert sent.tool_choice.function_name == "get_weather"
    assert sent.sampling.top_k == 20 and sent.sampling.min_p == pytest.approx(0.1)
    assert sent.sampling.repetition_penalty == pytest.approx(1.2) and sent.sampling.min_new_tokens == 2
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    oai(dev_gateway).chat.completions.create(
        model="macaron-chat", messages=HI,
        response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}},
    )
    fmt = fake.servicer.calls[-1].request.response_format
    assert fmt.type == pb.RESPONSE_FORMAT_TYPE_JSON_SCHEMA and fmt.json_schema.name == "answer"
    assert json.loads(fmt.json_schema.schema_json) == schema
    oai(dev_gateway).chat.completions.create(model="macaron-chat", messages=HI, extra_body={"top_k": 0})
    assert fake.servicer.calls[-1].request.sampling.top_k == -1  # vLLM's "off"


def test_parallel_tool_calls_reaches_the_router_and_nothing_is_trimmed(dev_gateway: ThreadedServer,
                                                                      fake: FakeRouterServer) -> None:
    """The specialist stops generation after the first call; the gateway passes the flag, never trims."""
    client = oai(dev_gateway)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    msgs = [{"role": "user", "content": "two tools"}]
    both = client.chat.completions.create(model="macaron-agent", messages=msgs, tools=tools)
    assert not fake.servicer.calls[-1].request.HasField("parallel_tool_calls")
    assert [c.id for c in both.choices[0].message.tool_calls] == ["call_1", "call_2"]
    client.chat.completions.create(model="macaron-agent", messages=msgs, tools=tools, parallel_tool_calls=False)
    sent = fake.servicer.calls[-1].request
    assert sent.HasField("parallel_tool_calls") and sent.parallel_tool_calls is False
    client.chat.completions.create(model="macaron-agent", messages=msgs, tools=tools, parallel_tool_calls=True)
    assert fake.servicer.calls[-1].request.parallel_tool_calls is True


def test_logprobs_whole_and_streamed_in_openai_shape(dev_gateway: ThreadedServer, fake: FakeRouterServer) -> None:
    client = oai(dev_gateway)
    whole = client.chat.completions.create(model="macaron-chat", messages=HI, logprobs=True, top_logprobs=2)
    sent = fake.servicer.calls[-1].request
    assert sent.logprobs and sent.top_logprobs == 2
    content = whole.choices[0].logprobs.content
    assert [(t.token, t.logprob, bytes(t.bytes)) for t in content] == [("Hello", -0.5, b"Hello"), (" world", -1.5, b" world")]
    assert [o.token for o in content[0].top_logprobs] == ["Hello", "alt1"]
    plain = client.chat.completions.create(model="macaron-chat", messages=HI)
    assert plain.choices[0].logprobs is None and not fake.servicer.calls[-1].request.logprobs
    chunks = list(client.chat.completions.create(model="macaron-chat", messages=HI, logprobs=True, stream=True))
    with_text = [c.choices[0] for c in chunks if c.choices and c.choices[0].delta.content]
    assert [(c.delta.content, [t.token for t in c.logprobs.content]) for c in with_text] == [
        ("Hello", ["Hello"]), (" world", [" world"])]  # each token's logprob rides with its text
    assert all(t.top_logprobs == [] for c in with_text for t in c.logprobs.content)


@pytest.mark.parametrize(("extra", "param"), [
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
    ({"top_logprobs": 3}, "top_logprobs"),
    ({"logprobs": "maybe"}, "logprobs"),
])
def test_bad_logprobs_are_400(dev_gateway: ThreadedServer, extra: dict, param: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        oai(dev_gateway).chat.completions.create(model="macaron-chat", messages=HI, **extra)
    assert info.value.status_code == 400 and info.value.body["param"] == param


def test_stream_in_openai_sse_shape_with_usage(dev_gateway: ThreadedServer) -> None:
    client = oai(dev_gateway)
    with client.chat.completions.with_streaming_response.create(
        model="macaron-auto", messages=[{"role": "user", "content": "python"}], stream=True,
        stream_options={"include_usage": True},
    ) as response:
        assert response.headers["x-macaron-specialist"] == "code"
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[len("data: "):]) for line in lines[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == "Hello world"
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 3
    stream = client.chat.completions.create(model="macaron-auto", messages=HI, stream=True)
    parsed = list(stream)
    assert all(c.usage is None for c in parsed)  # no include_usage: no usage chunk
    assert "".join(c.choices[0].delta.content or "" for c in parsed) == "Hello world"


def test_tool_calls_whole_and_streamed(dev_gateway: ThreadedServer, fake: FakeRouterServer) -> None:
    client = oai(dev_gateway)
    parameters = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather now", "parameters": parameters}}]
    msgs = [{"role": "user", "content": "tools"}]
    completion = client.chat.completions.create(model="macaron-agent", messages=msgs, tools=tools, tool_choice="required")
    sent = fake.servicer.calls[-1].request  # tools and tool_choice reach the router as they were given
    (tool,) = sent.tools
    assert tool.function.name == "get_weather" and tool.function.description == "Weather now"
    assert json.loads(tool.function.parameters_json) == parameters
    assert sent.tool_choice.mode == pb.TOOL_CHOICE_MODE_REQUIRED
    (call,) = completion.choices[0].message.tool_calls
    assert completion.choices[0].finish_reason == "tool_calls" and completion.choices[0].message.content is None
    assert call.id == "call_1" and json.loads(call.function.arguments) == {"city": "Paris"}
    deltas = [c.choices[0].delta.tool_calls for c in client.chat.completions.create(
        model="macaron-agent", messages=msgs, tools=tools, stream=True) if c.choices and c.choices[0].delta.tool_calls]
    assert deltas[0][0].id == "call_1" and deltas[0][0].function.name == "get_weather"
    assert "".join(d[0].function.arguments for d in deltas) == '{"city": "Paris"}'


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"model": "gpt-4o", "messages": HI}, "model", "model_not_found"),
        ({"model": "macaron-auto", "messages": HI, "n": 2}, "n", "unsupported_value"),
        ({"model": "macaron-auto", "messages": []}, "messages", "invalid_value"),
        ({"model": "macaron-auto", "messages": [{"role": "robot", "content": "x"}]}, "messages[0]", "invalid_value"),
        ({"model": "macaron-auto", "messages": [{"role": "user"}]}, "messages[0].content", "missing_required_parameter"),
        ({"model": "macaron-auto", "messages": HI, "temperature": 9}, "temperature", "invalid_value"),
        ({"model": "macaron-auto", "messages": HI, "bogus": 1}, "bogus", "unknown_parameter"),
        ({"model": "macaron-auto", "messages": HI * 9}, "messages", "too_many_messages"),
        ({"model": "macaron-auto", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
         "messages[0].content[0]", "unsupported_value"),
    ],
)
def test_bad_input_is_400_in_openai_shape(dev_gateway: ThreadedServer, body: dict, param: str, code: str) -> None:
    response = post(dev_gateway, body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["param"] == param and error["code"] == code
    assert response.headers["x-request-id"]


def test_openai_client_sees_bad_request(dev_gateway: ThreadedServer) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        oai(dev_gateway).chat.completions.create(model="macaron-auto", messages=HI, n=3)
    assert info.value.code == "unsupported_value" and info.value.param == "n"


def test_not_json_and_too_large(dev_gateway: ThreadedServer) -> None:
    response = httpx.post(dev_gateway.url + "/v1/chat/completions", content=b"{nope", timeout=10)
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_json"
    big = {"model": "macaron-auto", "messages": [{"role": "user", "content": "x" * 70_000}]}
    response = post(dev_gateway, big)
    assert response.status_code == 413 and response.json()["error"]["code"] == "request_too_large"
    chunked = httpx.post(dev_gateway.url + "/v1/chat/completions", content=iter([b"x" * 40_000] * 3), timeout=10)
    assert chunked.status_code == 413


@pytest.mark.parametrize(
    ("what", "status", "code"),
    [
        ("context", 400, "context_length_exceeded"),
        ("INVALID_ARGUMENT", 400, None),
        ("UNAUTHENTICATED", 401, "invalid_api_key"),
        ("NOT_FOUND", 404, None),
        ("RESOURCE_EXHAUSTED", 429, "rate_limit_exceeded"),
        ("UNAVAILABLE", 503, "unavailable"),
        ("DEADLINE_EXCEEDED", 504, "deadline_exceeded"),
        ("INTERNAL", 500, "internal"),
    ],
)
def test_router_status_codes_map_to_http(dev_gateway: ThreadedServer, what: str, status: int, code: str | None,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("macaron.sdk._client.INITIAL_RETRY_DELAY_S", 0.01)
    response = post(dev_gateway, {"model": "macaron-auto", "messages": [{"role": "user", "content": f"fail:{what}"}]})
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    if status == 429:
        assert response.headers["retry-after"] == "3"  # RetryInfo 2.5 s, rounded up
    if status == 503:
        assert response.headers["retry-after"] == "1"


def test_errors_after_the_stream_started_are_sse_error_frames(dev_gateway: ThreadedServer) -> None:
    body = {"model": "macaron-auto", "messages": [{"role": "user", "content": "midfail"}], "stream": True}
    with httpx.stream("POST", dev_gateway.url + "/v1/chat/completions", json=body, timeout=20) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line]
    assert json.loads(lines[-2][len("data: "):])["error"]["type"] == "server_error"
    with pytest.raises(openai.APIError):
        list(oai(dev_gateway).chat.completions.create(model="macaron-auto", stream=True,
                                                       messages=[{"role": "user", "content": "midfail"}]))


def test_engine_abort_is_503(dev_gateway: ThreadedServer) -> None:
    response = post(dev_gateway, {"model": "macaron-auto", "messages": [{"role": "user", "content": "abort"}]})
    assert response.status_code == 503 and response.json()["error"]["code"] == "aborted"


def test_client_disconnect_cancels_the_router_call(dev_gateway: ThreadedServer, fake: FakeRouterServer) -> None:
    """The router call's deadline is 10 s (router_timeout_s) and the stream would run 100 s: only a
    cancellation ends it within 5 s, and the fake counts only a cancellation before the deadline."""
    body = {"model": "macaron-auto", "messages": [{"role": "user", "content": "slow"}], "stream": True}
    with httpx.stream("POST", dev_gateway.url + "/v1/chat/completions", json=body, timeout=20) as response:
        lines = response.iter_lines()
        for _ in range(3):
            next(lines)
    assert fake.servicer.cancelled.wait(5), "the router call was not cancelled"


def test_client_leaving_a_non_streamed_request_cancels_the_router_call(dev_gateway: ThreadedServer,
                                                                       fake: FakeRouterServer) -> None:
    body = {"model": "macaron-auto", "messages": [{"role": "user", "content": "slow"}]}
    with pytest.raises(httpx.ReadTimeout):  # the client gives up after 1 s and closes the connection
        httpx.post(dev_gateway.url + "/v1/chat/completions", json=body, timeout=httpx.Timeout(10, read=1.0))
    assert fake.servicer.cancelled.wait(5), "the router call was not cancelled"


def test_trace_context_reaches_the_router(dev_gateway: ThreadedServer, fake: FakeRouterServer) -> None:
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    post(dev_gateway, {"model": "macaron-auto", "messages": HI}, {"traceparent": traceparent})
    assert fake.servicer.calls[-1].metadata["traceparent"].split("-")[1] == "4bf92f3577b34da6a3ce929d0e0e4736"


def test_request_id_is_made_when_absent(dev_gateway: ThreadedServer, fake: FakeRouterServer) -> None:
    response = post(dev_gateway, {"model": "macaron-auto", "messages": HI})
    rid = response.headers["x-request-id"]
    assert len(rid) >= 16 and fake.servicer.calls[-1].metadata["x-request-id"] == rid
    assert response.json()["id"] == f"chatcmpl-{rid}"


def test_models_health_ready_metrics_openapi(dev_gateway: ThreadedServer) -> None:
    models = oai(dev_gateway).models.list()
    assert [m.id for m in models.data] == ["macaron-auto", "macaron-chat", "macaron-agent", "macaron-code", "macaron-ui"]
    assert oai(dev_gateway).models.retrieve("macaron-code").id == "macaron-code"
    with pytest.raises(openai.NotFoundError):
        oai(dev_gateway).models.retrieve("gpt-4o")
    assert httpx.get(dev_gateway.url + "/healthz").status_code == 200
    ready = httpx.get(dev_gateway.url + "/readyz", timeout=10)
    assert ready.status_code == 200 and ready.json()["dev_mode"] is True
    missing = httpx.get(dev_gateway.url + "/v2/nothing")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"
    metrics = httpx.get(dev_gateway.url + "/metrics").text
    assert "macaron_gateway_requests_total" in metrics and "macaron_gateway_routes_total" in metrics
    spec = httpx.get(dev_gateway.url + "/openapi.json").json()
    assert "/v1/chat/completions" in spec["paths"] and "ChatCompletionRequest" in spec["components"]["schemas"]


def test_ending_a_session_is_204_then_404(dev_gateway: ThreadedServer, fake: FakeRouterServer) -> None:
    oai(dev_gateway).chat.completions.create(model="macaron-auto", messages=[{"role": "user", "content": "python?"}],
                                             extra_headers={"x-session-id": "sess-end"})
    assert "sess-end" in fake.servicer.sessions
    ended = httpx.delete(dev_gateway.url + "/v1/sessions/sess-end", timeout=10)
    assert ended.status_code == 204 and "sess-end" not in fake.servicer.sessions
    again = httpx.delete(dev_gateway.url + "/v1/sessions/sess-end", timeout=10)
    assert again.status_code == 404 and again.json()["error"]["code"] == "session_not_found"


def test_ending_a_session_needs_a_key(keyed_gateway: ThreadedServer, fake: FakeRouterServer) -> None:
    assert httpx.delete(keyed_gateway.url + "/v1/sessions/s1", timeout=10).status_code == 401
    response = httpx.delete(keyed_gateway.url + "/v1/sessions/s1", headers={"authorization": f"Bearer {API_KEY}"},
                            timeout=10)
    assert response.status_code == 404  # the key is forwarded; the router has no such session for it


def test_keys_are_required_and_forwarded(keyed_gateway: ThreadedServer, fake: FakeRouterServer) -> None:
    with pytest.raises(openai.AuthenticationError) as info:
        oai(keyed_gateway, key="mk-wrong").chat.completions.create(model="macaron-auto", messages=HI)
    assert info.value.status_code == 401 and info.value.code == "invalid_api_key"
    response = httpx.post(keyed_gateway.url + "/v1/chat/completions", json={"bad": "body"}, timeout=10)
    assert response.status_code == 401  # auth before validation, as OpenAI
    assert httpx.get(keyed_gateway.url + "/v1/models").status_code == 401
    completion = oai(keyed_gateway, key=API_KEY).chat.completions.create(model="macaron-auto", messages=HI)
    assert completion.choices[0].message.content == "Hello world"
    assert fake.servicer.calls[-1].metadata["authorization"] == f"Bearer {API_KEY}"


def test_per_key_rate_limit_is_429_with_retry_after(keyed_gateway: ThreadedServer) -> None:
    headers = {"authorization": f"Bearer {LIMITED_KEY}"}
    statuses = [post(keyed_gateway, {"model": "macaron-auto", "messages": HI}, headers).status_code for _ in range(2)]
    assert statuses == [200, 200]
    response = post(keyed_gateway, {"model": "macaron-auto", "messages": HI}, headers)
    assert response.status_code == 429 and int(response.headers["retry-after"]) >= 1
    assert response.json()["error"]["code"] == "rate_limit_exceeded"


def test_non_loopback_without_keys_is_refused(fake_router: FakeRouterServer) -> None:
    from macaron.auth import InsecureBindError
    from macaron.gateway.app import create_app

    with pytest.raises(InsecureBindError):
        create_app(make_settings(fake_router.target, gateway={"host": "0.0.0.0"}))


def test_draining_refuses_new_requests(fake_router: FakeRouterServer) -> None:
    from .conftest import start_gateway

    server = start_gateway(make_settings(fake_router.target))
    try:
        server._server.config.app.state.gateway.draining = True  # what SIGTERM does first
        response = post(server, {"model": "macaron-auto", "messages": HI})
        assert response.status_code == 503 and response.json()["error"]["code"] == "draining"
        assert httpx.get(server.url + "/readyz").status_code == 503
    finally:
        server.stop()


def test_macaron_gateway_command_serves_and_stops_on_sigterm(fake: FakeRouterServer, tmp_path) -> None:
    from engine_api.servers import free_port, wait_until_healthy
    from specialist.processes import macaron_command

    port = free_port()
    proc = macaron_command("macaron.gateway.cli", ["gateway", "--port", str(port), "--router-target", fake.target,
                                                   "--grace-period-s", "2"], tmp_path / "gateway.log")
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_healthy(url, proc=proc.proc, log=proc.log, path="/readyz", timeout=60)
        response = post(type("S", (), {"url": url})(), {"model": "macaron-auto", "messages": HI},
                        headers={"x-request-id": "cli-req"})
        assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"] == "Hello world"
    finally:
        code = proc.stop()
    assert code == 0
    assert "cli-req" in (tmp_path / "gateway.log").read_text()  # the request id is on the gateway's log lines
