"""End to end through the REST gateway with the official `openai` client: the real router,
specialists and embedded engine behind it (`macaron serve`)."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import jsonschema
import openai
import pytest

from .conftest import API_KEY, Stack

UI_SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string", "maxLength": 20}, "count": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["title", "count"],
    "additionalProperties": False,
}
TEXT = {"type": "text"}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "pattern": "^[A-Za-z ]{1,20}$"},
                           "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}


@pytest.fixture(scope="module")
def client(stack: Stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.api_url, api_key=API_KEY, max_retries=0, timeout=120.0)


def test_completion_with_usage_and_route_headers(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="macaron-chat", messages=[{"role": "user", "content": "Hello! How are you today?"}], max_tokens=16,
        extra_headers={"x-request-id": "e2e-req-1"},
    )
    completion = raw.parse()
    choice = completion.choices[0]
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    usage = completion.usage
    assert usage.prompt_tokens > 0 and 0 < usage.completion_tokens <= 16
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    cached = usage.prompt_tokens_details.cached_tokens
    assert isinstance(cached, int) and 0 <= cached < usage.prompt_tokens  # the last prompt token is always computed
    assert raw.headers["x-request-id"] == "e2e-req-1"
    assert raw.headers["x-macaron-specialist"] == "chat" and raw.headers["x-macaron-route-reason"] == "explicit"
    assert completion.model == "macaron-chat"


def test_prefix_cache_shows_in_cached_tokens(client: openai.OpenAI) -> None:
    messages = [{"role": "system", "content": "You answer briefly. " * 20}, {"role": "user", "content": "Hi there"}]
    client.chat.completions.create(model="macaron-code", messages=messages, max_tokens=4)
    again = client.chat.completions.create(model="macaron-code", messages=messages, max_tokens=4)
    assert again.usage.prompt_tokens_details.cached_tokens > 0


def test_streaming_with_include_usage(client: openai.OpenAI) -> None:
    with client.chat.completions.with_streaming_response.create(
        model="macaron-auto", messages=[{"role": "user", "content": "Write a python function that adds two numbers"}],
        max_tokens=24, stream=True, stream_options={"include_usage": True},
    ) as response:
        specialist = response.headers["x-macaron-specialist"]
        assert specialist in ("chat", "agent", "code", "ui")
        assert response.headers["x-macaron-route-reason"] in ("classifier", "judge", "default", "session")
        chunks = list(response.parse())
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes in (["stop"], ["length"])
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    assert text or chunks[-1].usage.completion_tokens > 0


def test_auto_and_forced_models(client: openai.OpenAI) -> None:
    for model in ("macaron-chat", "macaron-agent", "macaron-code", "macaron-ui"):
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=[{"role": "user", "content": "Show me something"}], max_tokens=8,
            response_format=TEXT,  # ui otherwise answers a whole UI description, longer than 8 tokens
        )
        assert raw.headers["x-macaron-specialist"] == model.removeprefix("macaron-"), model
        assert raw.headers["x-macaron-route-reason"] == "explicit"
    raw = client.chat.completions.with_raw_response.create(
        model="macaron-auto", messages=[{"role": "user", "content": "Fix this Python traceback: KeyError in dict"}],
        max_tokens=8,
    )
    assert raw.headers["x-macaron-route-reason"] != "explicit"
    assert float(raw.headers["x-macaron-route-confidence"]) >= 0


def test_tool_choice_required_gives_parsed_tool_calls(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="macaron-agent", messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER_TOOL], tool_choice="required", max_tokens=64, parallel_tool_calls=False,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls  # exactly one: parallel_tool_calls is false
    assert call.type == "function" and call.function.name == "get_weather" and call.id
    jsonschema.validate(json.loads(call.function.arguments), WEATHER_TOOL["function"]["parameters"])


def test_a_streamed_tool_call_arrives_as_openai_argument_deltas(client: openai.OpenAI) -> None:
    """First delta: index, id, type, name and arguments ""; then argument fragments as generated; finish tool_calls."""
    params = dict(model="macaron-agent", messages=[{"role": "user", "content": "What is the weather in Oslo?"}],
                  tools=[WEATHER_TOOL], tool_choice="required", max_tokens=64, temperature=0.0)
    chunks = list(client.chat.completions.create(**params, stream=True))
    deltas = [d for c in chunks if c.choices and c.choices[0].delta.tool_calls for d in c.choices[0].delta.tool_calls]
    first, rest = deltas[0], deltas[1:]
    assert (first.index, first.type, first.function.name, first.function.arguments) == (0, "function", "get_weather", "")
    assert first.id.startswith("call_")
    assert len(rest) > 3 and all(d.index == 0 and d.id is None and d.function.name is None for d in rest)
    arguments = "".join(d.function.arguments for d in rest)
    jsonschema.validate(json.loads(arguments), WEATHER_TOOL["function"]["parameters"])
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    with client.chat.completions.stream(**params) as stream:  # the client's own accumulation agrees
        final = stream.get_final_completion()
    (call,) = final.choices[0].message.tool_calls
    assert call.function.name == "get_weather" and call.function.arguments == arguments  # greedy: the same call


def test_logprobs_whole_and_streamed_from_the_engine(client: openai.OpenAI) -> None:
    params = dict(model="macaron-chat", messages=[{"role": "user", "content": "Tell me about the sea."}],
                  max_tokens=8, temperature=0.0, logprobs=True, top_logprobs=3)
    whole = client.chat.completions.create(**params)
    choice = whole.choices[0]
    content = choice.logprobs.content
    assert len(content) == whole.usage.completion_tokens
    assert b"".join(bytes(t.bytes) for t in content).decode("utf-8", errors="replace").startswith(choice.message.content)
    for t in content:
        assert len(t.top_logprobs) == 3 and t.logprob <= 0
        assert [o.logprob for o in t.top_logprobs] == sorted((o.logprob for o in t.top_logprobs), reverse=True)
        assert t.top_logprobs[0].token == t.token and t.top_logprobs[0].logprob == pytest.approx(t.logprob)
    streamed = [t for c in client.chat.completions.create(**params, stream=True)
                if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content]
    assert [(t.token, round(t.logprob, 4)) for t in streamed] == [(t.token, round(t.logprob, 4)) for t in content]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(**{**params, "top_logprobs": 21})
    assert info.value.param == "top_logprobs"


def test_legacy_completions_through_router_and_specialist(client: openai.OpenAI) -> None:
    params = dict(model="macaron-chat", prompt="Once upon a time", max_tokens=6, temperature=0.0)
    raw = client.completions.with_raw_response.create(**params, logprobs=2)
    completion = raw.parse()
    (choice,) = completion.choices
    assert raw.headers["x-macaron-specialist"] == "chat" and completion.object == "text_completion"
    assert completion.usage.completion_tokens == len(choice.logprobs.tokens) <= 6
    assert all(len(top) <= 2 for top in choice.logprobs.top_logprobs)
    assert choice.logprobs.text_offset[0] == 0
    streamed = "".join(c.choices[0].text for c in client.completions.create(**params, stream=True) if c.choices)
    assert streamed == choice.text
    both = client.completions.create(**{**params, "prompt": ["Once upon a time", "The sea"]}, echo=True)
    assert [c.index for c in both.choices] == [0, 1]
    assert both.choices[0].text == "Once upon a time" + choice.text and both.choices[1].text.startswith("The sea")
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(**params, echo=True, logprobs=1)
    assert info.value.param == "echo"


def test_a_forced_call_cut_by_max_tokens_answers_what_fit_with_length(client: openai.OpenAI) -> None:
    for budget in (6, 40):  # cut in the name, then in the arguments
        completion = client.chat.completions.create(
            model="macaron-agent", messages=[{"role": "user", "content": "What is the weather in Paris?"}],
            tools=[WEATHER_TOOL], tool_choice={"type": "function", "function": {"name": "get_weather"}}, max_tokens=budget,
        )
        choice = completion.choices[0]
        assert choice.finish_reason == "length" and completion.usage.completion_tokens == budget
        (call,) = choice.message.tool_calls
        assert call.function.name == "get_weather" and call.id
        arguments = call.function.arguments
        if budget == 6:
            assert arguments == ""  # nothing of the arguments fit
        else:
            assert arguments.startswith("{")
            with pytest.raises(json.JSONDecodeError):  # what fit: the arguments' JSON so far, incomplete
                json.loads(arguments)


def test_json_schema_on_ui_gives_valid_json(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="macaron-ui", messages=[{"role": "user", "content": "A counter card"}], max_tokens=64,
        response_format={"type": "json_schema", "json_schema": {"name": "card", "schema": UI_SCHEMA, "strict": True}},
    )
    assert completion.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(completion.choices[0].message.content), UI_SCHEMA)


def test_ui_over_rest_a2ui_by_default_and_the_old_schema_by_name(client: openai.OpenAI) -> None:
    """Default: SDK-valid A2UI or a clear 500 (the tiny model rarely keeps A2UI's references); the old
    UI description by naming it, with no schema sent."""
    from macaron.a2ui import validate_a2ui
    from macaron.specialist.ui_schema import validate_ui

    ask = {"model": "macaron-ui", "messages": [{"role": "user", "content": "A login form"}], "temperature": 0}
    try:
        completion = client.chat.completions.create(**ask)
        assert validate_a2ui(completion.choices[0].message.content)[0]["version"] == "v0.9"
    except openai.InternalServerError as exc:
        assert "is not valid A2UI v0.9" in exc.message
    old = client.chat.completions.create(**ask, response_format={"type": "json_schema", "json_schema": {"name": "macaron_ui_v1"}})
    assert old.choices[0].finish_reason == "stop" and "root" in validate_ui(old.choices[0].message.content)
    with pytest.raises(openai.BadRequestError, match="macaron_ui_v1"):
        client.chat.completions.create(**ask, response_format={"type": "json_schema", "json_schema": {"name": "mine"}})


def test_missing_or_wrong_key_is_401(stack: Stack) -> None:
    response = httpx.post(stack.api_url + "/chat/completions", timeout=30,
                          json={"model": "macaron-auto", "messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=stack.api_url, api_key="mk-nope", max_retries=0).chat.completions.create(
            model="macaron-auto", messages=[{"role": "user", "content": "hi"}])


@pytest.mark.parametrize(
    ("extra", "param"),
    [({"model": "gpt-4o"}, "model"), ({"n": 2}, "n"), ({"top_logprobs": 3}, "top_logprobs"), ({"temperature": 7}, "temperature")],
)
def test_bad_input_is_400(client: openai.OpenAI, extra: dict, param: str) -> None:
    body = {"model": "macaron-auto", "messages": [{"role": "user", "content": "hi"}], **extra}
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(**body)
    assert info.value.status_code == 400 and info.value.param == param
    assert set(info.value.body) >= {"message", "type", "param", "code"}


def test_context_overflow_is_400_context_length_exceeded(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="macaron-chat", messages=[{"role": "user", "content": "hi"}],
                                       max_tokens=4000)
    assert info.value.code == "context_length_exceeded"


def test_four_concurrent_sessions_keep_their_specialists(client: openai.OpenAI) -> None:
    run = str(time.time_ns())

    def session(specialist: str) -> list[tuple[str, str]]:
        sid = f"e2e-{specialist}-{run}"
        seen = []
        for turn, model in enumerate(["macaron-" + specialist, "macaron-auto", "macaron-auto"]):
            raw = client.chat.completions.with_raw_response.create(
                model=model, messages=[{"role": "user", "content": f"Turn {turn}: tell me more"}], max_tokens=6,
                extra_headers={"x-session-id": sid}, response_format=TEXT,
            )
            seen.append((raw.headers["x-macaron-specialist"], raw.headers["x-macaron-route-reason"]))
        return seen

    names = ["chat", "agent", "code", "ui"]
    with ThreadPoolExecutor(4) as pool:
        results = dict(zip(names, pool.map(session, names)))
    for name, seen in results.items():
        assert [s for s, _ in seen] == [name] * 3, (name, seen)
        assert [r for _, r in seen] == ["explicit", "session", "session"], (name, seen)


def test_models_health_metrics(stack: Stack, client: openai.OpenAI) -> None:
    assert {m.id for m in client.models.list()} >= {"macaron-auto", "macaron-ui"}
    assert httpx.get(stack.gateway_url + "/healthz").status_code == 200
    assert httpx.get(stack.gateway_url + "/readyz", timeout=10).json()["dev_mode"] is False
    assert "macaron_gateway_requests_total" in httpx.get(stack.gateway_url + "/metrics").text


def _running(stack: Stack) -> int:
    return httpx.get(stack.engine_url + "/v1/loads", timeout=5).json()["loads"][0]["num_running_reqs"]


def _aborted(stack: Stack) -> float:
    """The engine's count of aborted requests (SGLang's metric): only a cancellation moves it."""
    text = httpx.get(stack.engine_url + "/metrics", timeout=5).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("sglang:num_aborted_requests_total"))


LONG = {"max_tokens": 1900, "min_tokens": 1900, "temperature": 0,  # cannot end by itself before the test looks
        "messages": [{"role": "user", "content": "Tell me a very long story about macarons."}]}


def _wait_aborted(stack: Stack, before: float) -> None:
    deadline = time.monotonic() + 10
    while _aborted(stack) <= before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _aborted(stack) == before + 1, "the engine request was not aborted"
    while _running(stack) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _running(stack) == 0


def test_client_disconnect_cancels_down_to_the_engine(stack: Stack) -> None:
    body = {"model": "macaron-chat", "stream": True, **LONG}
    headers = {"authorization": f"Bearer {API_KEY}"}
    before = _aborted(stack)
    with httpx.stream("POST", stack.api_url + "/chat/completions", json=body, headers=headers, timeout=60) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        for _ in range(3):
            next(lines)
        running_while_streaming = _running(stack)
    assert running_while_streaming >= 1
    _wait_aborted(stack, before)


def test_client_leaving_a_non_streamed_request_cancels_down_to_the_engine(stack: Stack) -> None:
    body = {"model": "macaron-chat", **LONG}
    headers = {"authorization": f"Bearer {API_KEY}"}
    before = _aborted(stack)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(stack.api_url + "/chat/completions", json=body, headers=headers, timeout=httpx.Timeout(60, read=2.0))
    _wait_aborted(stack, before)
