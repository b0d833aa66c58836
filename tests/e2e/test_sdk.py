"""End to end through the gRPC SDK straight to the router of the running stack (`macaron serve`)."""

from __future__ import annotations

import asyncio
import json
import time

import jsonschema
import pytest

import macaron.sdk as sdk

from .conftest import API_KEY, Stack
from .test_openai_client import UI_SCHEMA, WEATHER_TOOL

TEXT = {"type": "text"}


@pytest.fixture(scope="module")
def client(stack: Stack):
    with sdk.MacaronClient(stack.router_target, api_key=API_KEY, timeout=120.0) as c:
        yield c


def test_create_forced_with_usage(client: sdk.MacaronClient) -> None:
    result = client.chat.create(messages=[{"role": "user", "content": "Hello there"}], specialist="code", max_tokens=12,
                                request_id="sdk-e2e-1")
    assert isinstance(result, sdk.ChatResult) and result.request_id == "sdk-e2e-1"
    assert result.route.specialist == "code" and result.route.reason == "explicit" and result.route.adapter == "code"
    assert result.route.replica.startswith("http://127.0.0.1:")
    assert result.finish_reason in ("stop", "length")
    assert result.usage.prompt_tokens > 0 and 0 < result.usage.completion_tokens <= 12


def test_stream_and_auto_route(client: sdk.MacaronClient) -> None:
    with client.chat.create(messages=[{"role": "user", "content": "Plan my trip and book a hotel"}], max_tokens=10,
                            response_format=TEXT, stream=True) as stream:
        assert stream.route is not None and stream.route.reason in ("classifier", "judge", "default")
        chunks = list(stream)
        result = stream.get_final_result()
    assert chunks[0].route == stream.route and chunks[-1].finish_reason is not None and chunks[-1].usage is not None
    assert result.text == "".join(c.text for c in chunks) and result.usage == chunks[-1].usage


def test_tool_choice_required(client: sdk.MacaronClient) -> None:
    result = client.chat.create(messages=[{"role": "user", "content": "Weather in Oslo?"}], specialist="agent",
                                tools=[WEATHER_TOOL], tool_choice="required", max_tokens=64)
    assert result.finish_reason == "tool_calls"
    (call,) = result.tool_calls  # a required call is one constrained call: never more
    assert call.function.name == "get_weather"
    jsonschema.validate(call.function.parsed_arguments(), WEATHER_TOOL["function"]["parameters"])


def test_json_schema_on_ui(client: sdk.MacaronClient) -> None:
    result = client.chat.create(
        messages=[{"role": "user", "content": "A counter card"}], specialist="ui", max_tokens=64,
        response_format={"type": "json_schema", "json_schema": {"name": "card", "schema": UI_SCHEMA}},
    )
    jsonschema.validate(json.loads(result.text), UI_SCHEMA)



def test_errors(stack: Stack, client: sdk.MacaronClient) -> None:
    with pytest.raises(sdk.AuthenticationError):
        client.with_options(api_key=None).chat.create(messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(sdk.BadRequestError):
        client.chat.create(messages=[{"role": "user", "content": "hi"}], temperature=9.0)
    with pytest.raises(sdk.ContextLengthExceededError) as info:
        client.chat.create(messages=[{"role": "user", "content": "hi"}], specialist="chat", max_tokens=4000)
    assert info.value.request_id


def test_completions_and_logprobs_through_the_router(client: sdk.MacaronClient) -> None:
    result = client.completions.create(prompt="def add(a, b):", specialist="code", max_tokens=6, temperature=0.0,
                                       logprobs=2)
    assert result.route.specialist == "code" and result.usage.completion_tokens == len(result.logprobs) <= 6
    assert all(len(t.top_logprobs) == 2 for t in result.logprobs)
    chat = client.chat.create(messages=[{"role": "user", "content": "hi"}], specialist="chat", max_tokens=4)
    assert chat.logprobs is None  # not asked for
    with pytest.raises(sdk.BadRequestError, match="top_logprobs"):  # the router checks what the gateway would
        client.chat.create(messages=[{"role": "user", "content": "hi"}], logprobs=True, top_logprobs=21)
    with pytest.raises(sdk.BadRequestError, match="top_logprobs needs logprobs"):
        client.chat.create(messages=[{"role": "user", "content": "hi"}], top_logprobs=2)


def test_a_prompt_with_messages_or_tools_is_a_bad_request(stack: Stack) -> None:
    import grpc

    from macaron.v1 import common_pb2 as pb
    from macaron.v1 import router_pb2_grpc

    with grpc.insecure_channel(stack.router_target) as channel:
        stub = router_pb2_grpc.RouterStub(channel)
        for request in (pb.GenerateRequest(prompt="x", messages=[pb.ChatMessage(role=pb.ROLE_USER, content="y")]),
                        pb.GenerateRequest(prompt="x", tools=[pb.Tool(function=pb.FunctionDefinition(name="f"))]),
                        pb.GenerateRequest(prompt="")):
            with pytest.raises(grpc.RpcError) as info:
                list(stub.Generate(request, metadata=[("authorization", f"Bearer {API_KEY}")], timeout=30))
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def _nested_schema(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


@pytest.mark.parametrize("depth", [40, 300])
def test_deeply_nested_schemas_are_bad_requests(client: sdk.MacaronClient, depth: int) -> None:
    """Past the gateway (the SDK calls the router directly): a schema nested hundreds deep is a clear 400."""
    for specialist, params in (("chat", {"response_format": {"type": "json_schema", "json_schema": {
            "name": "deep", "schema": _nested_schema(depth)}}}),
            ("agent", {"tools": [{"type": "function", "function": {"name": "f", "parameters": _nested_schema(depth)}}],
                       "tool_choice": "required"})):
        with pytest.raises(sdk.BadRequestError, match="nested"):
            client.chat.create(messages=[{"role": "user", "content": "hi"}], specialist=specialist, max_tokens=4,
                               **params)


async def test_four_concurrent_sessions_async(stack: Stack) -> None:
    run = str(time.time_ns())
    async with sdk.AsyncMacaronClient(stack.router_target, api_key=API_KEY, timeout=120.0) as client:

        async def session(name: str) -> list[tuple[str | None, str]]:
            sid = f"sdk-{name}-{run}"
            seen = []
            for turn, specialist in enumerate([name, "auto", "auto"]):
                result = await client.chat.create(
                    messages=[{"role": "user", "content": f"Turn {turn}, go on"}], specialist=specialist,
                    session_id=sid, max_tokens=6, response_format=TEXT,
                )
                seen.append((result.route.specialist, result.route.reason))
            classified = await client.chat.classify(messages=[{"role": "user", "content": "and then?"}], session_id=sid)
            # Two words: too short to switch a session (router.switch_min_words), whatever the classifier says.
            seen.append((classified.route.specialist, classified.route.reason))
            return seen

        names = ["chat", "agent", "code", "ui"]
        results = dict(zip(names, await asyncio.gather(*(session(n) for n in names))))
    for name, seen in results.items():
        assert seen == [(name, "explicit"), (name, "session"), (name, "session"), (name, "session")], (name, seen)
