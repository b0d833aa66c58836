"""The four specialists over real gRPC on loopback, backed by a real embedded engine over HTTP."""

from __future__ import annotations

import json
import math
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import httpx
import jsonschema
import pytest
import yaml
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from macaron.a2ui import a2ui_schema, max_output_bytes, validate_a2ui
from macaron.specialist.ui_schema import ui_schema
from macaron.v1 import common_pb2 as pb
from macaron.v1 import specialist_pb2

from .helpers import SPECIALIST_NAMES, TOOL_SCHEMAS, Result, error_of, generate, request, tools, user
from .processes import health_status

GREEDY = pb.SamplingParams(temperature=0.0, max_new_tokens=16)
TEXT = pb.ResponseFormat(type=pb.RESPONSE_FORMAT_TYPE_TEXT)


def test_each_specialist_streams_with_its_own_adapter(stubs, engine_url) -> None:
    outputs = {}
    for name in SPECIALIST_NAMES:
        result = generate(stubs[name], request("Tell me about the weather.", sampling=GREEDY, response_format=TEXT))
        assert len([c for c in result.chunks if c.text]) > 1, "tokens are streamed, not sent in one chunk"
        # the route rides on the first token's chunk: no message of its own ahead of the first token
        assert result.chunks[0].HasField("route") and result.chunks[0].text
        assert [c.HasField("route") for c in result.chunks].count(True) == 1
        assert result.route.adapter == name and result.route.replica == engine_url
        assert result.route.reason == pb.ROUTE_REASON_DIRECT
        assert result.finish.reason == pb.FINISH_REASON_LENGTH and result.finish.length == 16
        assert result.chunks[-1].usage.completion_tokens == 16 and result.chunks[-1].usage.prompt_tokens > 0
        outputs[name] = result.text
    # Same system prompt, same request, greedy: only the adapter differs.
    assert len(set(outputs.values())) == 4, outputs


def test_info_health_and_reflection(stubs, specialist_ports, engine_url) -> None:
    info = stubs["ui"].Info(specialist_pb2.InfoRequest(), timeout=10)
    assert (info.name, info.adapter, info.specialist) == ("ui", "ui", pb.SPECIALIST_KIND_UI)
    assert list(info.engine_replicas) == [engine_url] and info.context_length == 2048
    assert json.loads(info.output_schema_json) == a2ui_schema()  # the bounded A2UI grammar by default
    assert health_status(specialist_ports["chat"]) == health_pb2.HealthCheckResponse.SERVING
    with grpc.insecure_channel(f"127.0.0.1:{specialist_ports['chat']}") as channel:
        answers = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10
        )
        names = {s.name for a in answers for s in a.list_services_response.service}
    assert {"macaron.v1.Specialist", "grpc.health.v1.Health"} <= names


UI_V1 = pb.ResponseFormat(type=pb.RESPONSE_FORMAT_TYPE_JSON_SCHEMA, json_schema=pb.JsonSchemaFormat(name="macaron_ui_v1"))


def test_old_ui_schema_by_response_format_always_validates(stubs) -> None:
    """Clients of the UI description v1 name it as their response_format; no schema needs to be sent."""
    validator = jsonschema.Draft202012Validator(ui_schema())
    topics = ["a login form", "a weather card", "a todo list", "a settings page", "a checkout", "a music player",
              "a signup wizard", "a search bar", "a photo gallery", "a chat window"]

    def one(i: int) -> str:
        req = request(f"Design {topics[i % len(topics)]} number {i}.", response_format=UI_V1,
                      sampling=pb.SamplingParams(seed=i, temperature=1.0))
        result = generate(stubs["ui"], req, timeout=120)
        assert result.finish.reason == pb.FINISH_REASON_STOP
        return result.text

    with ThreadPoolExecutor(max_workers=10) as pool:
        texts = list(pool.map(one, range(30)))
    for text in texts:
        validator.validate(json.loads(text))
    assert len(set(texts)) > 1


def test_ui_answers_are_sdk_valid_a2ui_or_refused_clearly(stubs) -> None:
    """By default ui answers A2UI v0.9 messages the official SDK accepts (after pruning strays); anything
    else is INTERNAL with the SDK's reason, never a broken reply. (The tiny random model keeps the grammar
    but not the id references, so here most answers are refused; the real model's are checked in
    tests/smollm2.)"""
    def one(i: int) -> Result | grpc.RpcError:
        req = request(f"Design a form number {i}.", sampling=pb.SamplingParams(seed=i, temperature=1.0))
        try:
            return generate(stubs["ui"], req, timeout=120)
        except grpc.RpcError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(one, range(8)))
    for result in results:
        if isinstance(result, grpc.RpcError):
            assert result.code() == grpc.StatusCode.INTERNAL, result
            assert "is not valid A2UI v0.9 (basic catalog)" in result.details()
        else:
            assert result.finish.reason == pb.FINISH_REASON_STOP
            assert validate_a2ui(result.text)[0]["createSurface"]["surfaceId"] == "main"
            assert len(result.text.encode()) <= max_output_bytes()


def test_agent_required_tool_choice_gives_valid_calls(stubs) -> None:
    def one(i: int) -> pb.ToolCallDelta:
        req = request(f"Task {i}: check the forecast or write to Bob.", tools=tools(),
                      tool_choice=pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_REQUIRED), sampling=pb.SamplingParams(seed=i))
        result = generate(stubs["agent"], req)
        assert result.finish.reason == pb.FINISH_REASON_TOOL_CALLS and len(result.calls) == 1
        return result.calls[0]

    with ThreadPoolExecutor(max_workers=6) as pool:
        calls = list(pool.map(one, range(12)))
    for call in calls:
        assert call.id.startswith("call_") and call.type == "function"
        jsonschema.validate(json.loads(call.arguments), TOOL_SCHEMAS[call.name])


@pytest.mark.parametrize("function", ["get_weather", "send_email"])
def test_agent_named_function_is_called(stubs, function: str) -> None:
    for seed in range(3):
        req = request("Please help.", tools=tools(), tool_choice=pb.ToolChoice(function_name=function),
                      sampling=pb.SamplingParams(seed=seed))
        result = generate(stubs["agent"], req)
        assert [c.name for c in result.calls] == [function]
        jsonschema.validate(json.loads(result.calls[0].arguments), TOOL_SCHEMAS[function])


def test_agent_conversation_with_tool_results_runs(stubs) -> None:
    call = pb.ToolCall(id="call_1", type="function",
                       function=pb.FunctionCall(name="get_weather", arguments='{"city": "Paris", "unit": "celsius", "days": 1}'))
    req = pb.GenerateRequest(
        messages=[
            pb.ChatMessage(role=pb.ROLE_SYSTEM, content="Be brief."),
            user("What is the weather in Paris?"),
            pb.ChatMessage(role=pb.ROLE_ASSISTANT, tool_calls=[call]),
            pb.ChatMessage(role=pb.ROLE_TOOL, tool_call_id="call_1", content='{"temp": 21}'),
        ],
        tools=tools(),
        sampling=pb.SamplingParams(max_new_tokens=12, temperature=0.0),
    )
    result = generate(stubs["agent"], req)
    assert result.finish.reason in (pb.FINISH_REASON_STOP, pb.FINISH_REASON_LENGTH, pb.FINISH_REASON_TOOL_CALLS)
    assert result.chunks[-1].usage.prompt_tokens > 100  # tools, call and result were all rendered


def test_json_schema_response_format_on_chat(stubs) -> None:
    schema = {
        "type": "object",
        "properties": {"answer": {"enum": ["yes", "no"]}, "score": {"type": "integer", "minimum": 0, "maximum": 10},
                       "reason": {"type": "string", "pattern": "^[a-z ]{0,24}$"}},
        "required": ["answer", "score"],
        "additionalProperties": False,
    }
    fmt = pb.ResponseFormat(type=pb.RESPONSE_FORMAT_TYPE_JSON_SCHEMA,
                            json_schema=pb.JsonSchemaFormat(name="verdict", schema_json=json.dumps(schema)))
    for seed in range(4):
        result = generate(stubs["chat"], request(f"Is {seed} even?", response_format=fmt, sampling=pb.SamplingParams(seed=seed)))
        assert result.finish.reason == pb.FINISH_REASON_STOP
        jsonschema.validate(json.loads(result.text), schema)


def _engine_state(engine_url: str) -> dict:
    return httpx.get(engine_url + "/server_info", timeout=5).json()["internal_states"][0]


def _wait_idle(engine_url: str, timeout: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        state = _engine_state(engine_url)
        if state["num_running"] == 0 and state["num_queued"] == 0 or time.monotonic() > deadline:
            return state
        time.sleep(0.05)


LONG = pb.SamplingParams(max_new_tokens=1500, min_new_tokens=1500, temperature=0.0)


def test_cancellation_aborts_the_engine_request(stubs, engine_url) -> None:
    before = _wait_idle(engine_url)["requests_aborted_total"]
    call = stubs["code"].Generate(request("Write a long program.", sampling=LONG), timeout=60)
    next(call), next(call)
    call.cancel()
    state = _wait_idle(engine_url)
    assert state["num_running"] == 0 and state["requests_aborted_total"] == before + 1


def test_deadline_propagates_and_aborts(stubs, engine_url) -> None:
    before = _wait_idle(engine_url)["requests_aborted_total"]
    started = time.monotonic()
    error = error_of(stubs["chat"], request("Talk for a long time.", sampling=LONG), timeout=0.8)
    assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED and time.monotonic() - started < 5
    state = _wait_idle(engine_url)
    assert state["num_running"] == 0 and state["requests_aborted_total"] == before + 1


def _bad_requests() -> dict[str, pb.GenerateRequest]:
    bad_tool = pb.Tool(function=pb.FunctionDefinition(name="f", parameters_json='{"type": "objekt"}'))
    return {
        "no messages": pb.GenerateRequest(),
        "unset role": pb.GenerateRequest(messages=[pb.ChatMessage(content="hi")]),
        "unknown role": pb.GenerateRequest(messages=[pb.ChatMessage(role=42, content="hi")]),
        "invalid tool schema": request(tools=[bad_tool]),
        "tool schema not JSON": request(tools=[pb.Tool(function=pb.FunctionDefinition(name="f", parameters_json="{"))]),
        "bad function name": request(tools=[pb.Tool(function=pb.FunctionDefinition(name="no spaces"))]),
        "unknown named function": request(tools=tools(), tool_choice=pb.ToolChoice(function_name="nope")),
        "required without tools": request(tool_choice=pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_REQUIRED)),
        "invalid JSON schema": request(response_format=pb.ResponseFormat(
            type=pb.RESPONSE_FORMAT_TYPE_JSON_SCHEMA, json_schema=pb.JsonSchemaFormat(schema_json='{"type": 5}'))),
        "temperature": request(sampling=pb.SamplingParams(temperature=1e9)),
        "temperature nan": request(sampling=pb.SamplingParams(temperature=math.nan)),
        "top_p": request(sampling=pb.SamplingParams(top_p=5)),
        "top_k": request(sampling=pb.SamplingParams(top_k=-7)),
        "max_new_tokens": request(sampling=pb.SamplingParams(max_new_tokens=10**9)),
        "zero max_new_tokens": request(sampling=pb.SamplingParams(max_new_tokens=0)),
        "replica hint outside the set": request(engine_replica_hint="http://169.254.169.254:80"),
        "replica hint not a URL": request(engine_replica_hint="ftp://x"),
        "context overflow": request("word " * 400, sampling=pb.SamplingParams(max_new_tokens=2000)),
        "forced to another specialist": request(specialist=pb.SPECIALIST_KIND_CODE),
    }


@pytest.mark.parametrize("case", list(_bad_requests()))
def test_bad_input_is_invalid_argument(stubs, case: str) -> None:
    error = error_of(stubs["chat"], _bad_requests()[case])
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (case, error.details())
    assert error.details()


def test_replica_hint_inside_the_set_is_obeyed(stubs, engine_url) -> None:
    result = generate(stubs["chat"], request(engine_replica_hint=engine_url + "/", sampling=GREEDY))
    assert result.route.replica == engine_url


def test_router_decision_is_completed_and_returned(stubs) -> None:
    route = pb.RouteDecision(specialist=pb.SPECIALIST_KIND_CODE, reason=pb.ROUTE_REASON_CLASSIFIER, confidence=0.83)
    result = generate(stubs["code"], request(route=route, specialist=pb.SPECIALIST_KIND_CODE, sampling=GREEDY))
    assert (result.route.reason, result.route.adapter) == (pb.ROUTE_REASON_CLASSIFIER, "code")
    assert result.route.confidence == pytest.approx(0.83)


def test_retry_info_rides_with_resource_exhausted() -> None:
    from macaron.specialist.errors import OverloadedError
    from macaron.specialist.servicer import status_for

    status = status_for(OverloadedError("busy", retry_after_s=1.5))
    assert status.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    trailers = dict(status.trailing_metadata)
    assert trailers["retry-after-ms"] == "1500"
    details = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    info = error_details_pb2.RetryInfo()
    assert details.details[0].Unpack(info) and info.retry_delay.ToMilliseconds() == 1500


def test_metrics_count_calls_tokens_and_first_chunks(stubs, stack) -> None:
    generate(stubs["code"], request("Write a loop.", sampling=GREEDY, response_format=TEXT))
    config = yaml.safe_load(stack.config.read_text())
    url = f"http://127.0.0.1:{config['specialists']['code']['metrics_port']}/metrics"
    body = httpx.get(url, timeout=10).text
    ok = [line for line in body.splitlines() if line.startswith("macaron_specialist_requests_total{")]
    assert any('code="OK"' in line and 'specialist="code"' in line and float(line.split()[-1]) >= 1 for line in ok), ok
    assert 'macaron_specialist_time_to_first_chunk_seconds_count{specialist="code"}' in body
    tokens = [l for l in body.splitlines() if l.startswith('macaron_specialist_completion_tokens_total{specialist="code"}')]
    assert tokens and float(tokens[0].split()[-1]) >= 16


def _code_prompt_ids(stack, text: str) -> tuple[list[int], str]:
    """The code profile's rendering of a one-turn request in this process, and its render key."""
    from macaron.config import load_settings
    from macaron.prompting import render, render_key
    from macaron.prompting.convert import request_from_proto
    from macaron.prompting.tokenizer import load_light_tokenizer
    from macaron.specialist.profiles import load_profile

    settings = load_settings(stack.config)
    tokenizer = load_light_tokenizer(settings.specialists.tokenizer_path)
    profile = load_profile(settings.specialists, "code")
    chat = request_from_proto(request(text, sampling=GREEDY, response_format=TEXT))
    ids = tokenizer(render(chat, profile, tokenizer), add_special_tokens=False)["input_ids"]
    return list(ids), render_key(profile, tokenizer) or ""


def _routed_counts(stack) -> dict[str, float]:
    config = yaml.safe_load(stack.config.read_text())
    body = httpx.get(f"http://127.0.0.1:{config['specialists']['code']['metrics_port']}/metrics", timeout=10).text
    prefix = 'macaron_specialist_routed_prompts_total{'
    return {line.split('outcome="')[1].split('"')[0]: float(line.split()[-1])
            for line in body.splitlines() if line.startswith(prefix)}


def test_a_routed_prompt_is_used_only_when_its_render_key_is_the_profiles(stubs, stack) -> None:
    """The engine counts the prompt it was sent: the router's ids when the key matches (here those of a longer
    prompt, so the count tells them apart), the specialist's own rendering when it does not or an id is out of
    the vocabulary."""
    text = "Write a loop."
    own, key = _code_prompt_ids(stack, text)
    other, _ = _code_prompt_ids(stack, "Write a loop that prints the numbers from one to ten, one per line.")
    assert key and len(other) > len(own)
    before = _routed_counts(stack)

    def prompt_tokens(routed: pb.RoutedPrompt) -> int:
        result = generate(stubs["code"], request(text, sampling=GREEDY, response_format=TEXT, routed_prompt=routed))
        return result.chunks[-1].usage.prompt_tokens

    assert prompt_tokens(pb.RoutedPrompt(token_ids=other, render_key=key)) == len(other)
    assert prompt_tokens(pb.RoutedPrompt(token_ids=other, render_key="another-template")) == len(own)
    assert prompt_tokens(pb.RoutedPrompt(token_ids=[*other, 10**7], render_key=key)) == len(own)
    assert prompt_tokens(pb.RoutedPrompt()) == len(own)
    after = _routed_counts(stack)
    assert after.get("used", 0) - before.get("used", 0) == 1
    assert after.get("rendered_again", 0) - before.get("rendered_again", 0) == 2
