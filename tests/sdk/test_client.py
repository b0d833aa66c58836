"""The SDK's sync and async clients against a scripted fake router: params, results, errors, retries.

The same checks run on both twins (`client` is parametrized); the real router is exercised in
tests/e2e.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

import macaron.sdk as sdk
from macaron.v1 import common_pb2 as pb

from .fake_router import FakeRouterServer

USER = [{"role": "user", "content": "hi"}]


class Twin:
    """Runs the same call on MacaronClient or AsyncMacaronClient, returning plain results."""

    def __init__(self, kind: str, target: str, **options: Any) -> None:
        self.kind = kind
        self.target = target
        self.options = options

    def create(self, **params: Any) -> sdk.ChatResult:
        if self.kind == "sync":
            with sdk.MacaronClient(self.target, **self.options) as c:
                return c.chat.create(**params)

        async def run() -> sdk.ChatResult:
            async with sdk.AsyncMacaronClient(self.target, **self.options) as c:
                return await c.chat.create(**params)

        return asyncio.run(run())

    def stream(self, **params: Any) -> tuple[sdk.Route | None, list[sdk.ChatChunk], sdk.ChatResult]:
        if self.kind == "sync":
            with sdk.MacaronClient(self.target, **self.options) as c:
                with c.chat.create(**params, stream=True) as s:
                    chunks = list(s)
                    return s.route, chunks, s.get_final_result()

        async def run() -> Any:
            async with sdk.AsyncMacaronClient(self.target, **self.options) as c:
                async with await c.chat.create(**params, stream=True) as s:
                    chunks = [chunk async for chunk in s]
                    return s.route, chunks, await s.get_final_result()

        return asyncio.run(run())

    def classify(self, **params: Any) -> sdk.Classification:
        if self.kind == "sync":
            with sdk.MacaronClient(self.target, **self.options) as c:
                return c.chat.classify(**params)

        async def run() -> sdk.Classification:
            async with sdk.AsyncMacaronClient(self.target, **self.options) as c:
                return await c.chat.classify(**params)

        return asyncio.run(run())

    def end_session(self, session_id: str) -> bool:
        if self.kind == "sync":
            with sdk.MacaronClient(self.target, **self.options) as c:
                return c.sessions.end(session_id)

        async def run() -> bool:
            async with sdk.AsyncMacaronClient(self.target, **self.options) as c:
                return await c.sessions.end(session_id)

        return asyncio.run(run())


@pytest.fixture(params=["sync", "async"])
def twin(request: pytest.FixtureRequest, fake: FakeRouterServer) -> Twin:
    return Twin(request.param, fake.target, api_key="mk-test", timeout=10.0)


def test_create_returns_typed_result_and_sends_metadata(twin: Twin, fake: FakeRouterServer) -> None:
    result = twin.create(messages=USER, request_id="rid-1", session_id="s1", max_tokens=7, temperature=0.0,
                         stop=["\n"], seed=3)
    assert result.text == "Hello world"
    assert result.finish_reason == "stop"
    assert result.usage == sdk.Usage(12, 2, 3) and result.usage.total_tokens == 14
    assert result.route.specialist == "chat" and result.route.reason == "classifier"
    assert result.route.model == "macaron-chat" and result.route.adapter == "chat"
    call = fake.servicer.calls[-1]
    assert call.metadata["authorization"] == "Bearer mk-test"
    assert call.metadata["x-request-id"] == "rid-1"
    req = call.request
    assert req.request_id == "rid-1" and req.session_id == "s1"
    assert req.sampling.max_new_tokens == 7 and req.sampling.HasField("temperature") and list(req.sampling.stop) == ["\n"]
    assert not req.sampling.HasField("top_p")  # unset params stay unset (the specialist's defaults apply)


def test_params_become_protobufs(twin: Twin, fake: FakeRouterServer) -> None:
    messages = [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "weather "}, {"type": "text", "text": "in Paris?"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "user", "content": "thanks"},
    ]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "maxItems": 3}}}]
    twin.create(messages=messages, tools=tools, tool_choice={"type": "function", "function": {"name": "get_weather"}},
                specialist="agent")
    req = fake.servicer.calls[-1].request
    assert [m.role for m in req.messages] == [pb.ROLE_DEVELOPER, pb.ROLE_USER, pb.ROLE_ASSISTANT, pb.ROLE_TOOL, pb.ROLE_USER]
    assert req.messages[1].content == "weather in Paris?"
    assert req.messages[2].tool_calls[0].function.name == "get_weather"
    assert req.messages[3].tool_call_id == "c1"
    assert json.loads(req.tools[0].function.parameters_json) == {"type": "object", "maxItems": 3}  # ints stay ints
    assert req.tool_choice.function_name == "get_weather"
    assert req.specialist == pb.SPECIALIST_KIND_AGENT


def test_stream_yields_route_first_and_folds_into_a_result(twin: Twin) -> None:
    route, chunks, result = twin.stream(messages=[{"role": "user", "content": "write python"}])
    assert route is not None and route.specialist == "code"
    assert chunks[0].route == route and [c.text for c in chunks[1:3]] == ["Hello", " world"]
    assert chunks[-1].finish_reason == "stop" and chunks[-1].usage is not None
    assert result.text == "Hello world" and result.usage.cached_tokens == 3


def test_tool_call_deltas_are_merged(twin: Twin) -> None:
    result = twin.create(messages=[{"role": "user", "content": "tools"}])
    assert result.finish_reason == "tool_calls"
    (call,) = result.tool_calls
    assert call.id == "call_1" and call.function.name == "get_weather"
    assert call.function.parsed_arguments() == {"city": "Paris"}


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        ("INVALID_ARGUMENT", sdk.BadRequestError),
        ("UNAUTHENTICATED", sdk.AuthenticationError),
        ("NOT_FOUND", sdk.NotFoundError),
        ("RESOURCE_EXHAUSTED", sdk.RateLimitError),
        ("DEADLINE_EXCEEDED", sdk.APITimeoutError),
        ("INTERNAL", sdk.InternalServerError),
        ("context", sdk.ContextLengthExceededError),
    ],
)
def test_status_codes_map_to_one_error_tree(twin: Twin, code: str, cls: type[sdk.APIError]) -> None:
    twin.options["max_retries"] = 0  # a 429 is retried otherwise (below)
    with pytest.raises(cls) as info:
        twin.create(messages=[{"role": "user", "content": f"fail:{code}"}], request_id="rid-err")
    err = info.value
    assert isinstance(err, sdk.APIError) and err.request_id == "rid-err"
    if code == "RESOURCE_EXHAUSTED":
        assert err.retry_after_s == pytest.approx(2.5)
    if code == "context":
        assert err.reason == "context_length_exceeded" and err.code == grpc.StatusCode.INVALID_ARGUMENT


def test_unavailable_before_the_first_chunk_is_retried(twin: Twin, fake: FakeRouterServer,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("macaron.sdk._client.INITIAL_RETRY_DELAY_S", 0.01)
    result = twin.create(messages=[{"role": "user", "content": "flaky:2"}], request_id="flaky-ok")
    assert result.text == "Hello world"
    assert fake.servicer.attempts["flaky-ok"] == 3
    with pytest.raises(sdk.APIConnectionError):
        twin.create(messages=[{"role": "user", "content": "flaky:3"}], request_id="flaky-fail")
    assert fake.servicer.attempts["flaky-fail"] == 3  # 1 + max_retries (2)


def test_rate_limited_calls_are_retried_after_the_delay_the_server_asks(twin: Twin, fake: FakeRouterServer) -> None:
    start = time.monotonic()
    result = twin.create(messages=[{"role": "user", "content": "limited:2:300"}], request_id="limited-ok")
    assert result.text == "Hello world" and fake.servicer.attempts["limited-ok"] == 3
    assert time.monotonic() - start >= 0.55  # two waits of 300 ms (RetryInfo), not the 0.5 s backoff's jitter
    with pytest.raises(sdk.RateLimitError) as info:
        twin.create(messages=[{"role": "user", "content": "limited:9:50"}], request_id="limited-fail")
    assert fake.servicer.attempts["limited-fail"] == 3 and info.value.retry_after_s == pytest.approx(0.05)
    start = time.monotonic()
    with pytest.raises(sdk.RateLimitError):  # a delay over a minute is not waited for
        twin.create(messages=[{"role": "user", "content": "limited:1:61000"}], request_id="limited-long")
    assert fake.servicer.attempts["limited-long"] == 1 and time.monotonic() - start < 5


def test_rate_limits_can_be_handed_straight_back(fake: FakeRouterServer) -> None:
    with sdk.MacaronClient(fake.target, timeout=10, retry_rate_limits=False) as client:
        with pytest.raises(sdk.RateLimitError):
            client.chat.create(messages=[{"role": "user", "content": "limited:1:50"}], request_id="limited-once")
    assert fake.servicer.attempts["limited-once"] == 1


def test_sampling_extras_reach_the_router(twin: Twin, fake: FakeRouterServer) -> None:
    twin.create(messages=USER, top_k=40, min_p=0.05, repetition_penalty=1.1, min_tokens=3)
    sampling = fake.servicer.calls[-1].request.sampling
    assert sampling.top_k == 40 and sampling.min_p == pytest.approx(0.05)
    assert sampling.repetition_penalty == pytest.approx(1.1) and sampling.min_new_tokens == 3


def test_sessions_end_says_whether_there_was_one(twin: Twin, fake: FakeRouterServer) -> None:
    twin.create(messages=[{"role": "user", "content": "python"}], session_id="s-twin")
    assert twin.end_session("s-twin") is True and "s-twin" not in fake.servicer.sessions
    assert twin.end_session("s-twin") is False
    with pytest.raises(sdk.BadRequestError):
        twin.end_session("")


def test_the_package_ships_its_types() -> None:
    from importlib import resources

    assert resources.files("macaron.sdk").joinpath("py.typed").is_file()


def test_other_errors_and_mid_stream_failures_are_not_retried(twin: Twin, fake: FakeRouterServer) -> None:
    before = len(fake.servicer.calls)
    with pytest.raises(sdk.InternalServerError):
        twin.create(messages=[{"role": "user", "content": "midfail"}])
    with pytest.raises(sdk.BadRequestError):
        twin.create(messages=[{"role": "user", "content": "fail:INVALID_ARGUMENT"}])
    assert len(fake.servicer.calls) == before + 2


def test_deadline_covers_the_whole_stream(twin: Twin) -> None:
    twin.options["timeout"] = 0.4
    start = time.monotonic()
    with pytest.raises(sdk.APITimeoutError):
        twin.create(messages=[{"role": "user", "content": "slow"}])
    assert time.monotonic() - start < 5


def test_classify(twin: Twin) -> None:
    c = twin.classify(messages=[{"role": "user", "content": "python please"}])
    assert c.route.specialist == "code" and c.route.reason == "classifier"
    assert set(c.probabilities) == {"chat", "agent", "code", "ui"}
    assert c.probabilities["code"] == pytest.approx(0.75)


def test_closing_a_stream_cancels_the_call(fake: FakeRouterServer) -> None:
    with sdk.MacaronClient(fake.target) as client:
        stream = client.chat.create(messages=[{"role": "user", "content": "slow"}], stream=True)
        it = iter(stream)
        next(it), next(it)
        stream.close()
        assert list(it) == []  # a closed stream ends quietly
    assert fake.servicer.cancelled.wait(5)


async def test_async_close_cancels_the_call(fake: FakeRouterServer) -> None:
    async with sdk.AsyncMacaronClient(fake.target) as client:
        stream = await client.chat.create(messages=[{"role": "user", "content": "slow"}], stream=True)
        seen = 0
        async for _ in stream:
            seen += 1
            if seen == 2:
                await stream.close()
    assert await asyncio.to_thread(fake.servicer.cancelled.wait, 5)


def test_with_options_shares_the_channel_and_overrides_defaults(fake: FakeRouterServer) -> None:
    with sdk.MacaronClient(fake.target, api_key="a", max_retries=2) as client:
        other = client.with_options(api_key="b", max_retries=0, metadata={"x-team": "blue"})
        assert other._channel is client._channel and other.chat is not client.chat
        with pytest.raises(sdk.APIConnectionError):
            other.chat.create(messages=[{"role": "user", "content": "flaky:1"}], request_id="opt-1")
        assert fake.servicer.attempts["opt-1"] == 1
        assert fake.servicer.calls[-1].metadata["authorization"] == "Bearer b"
        assert fake.servicer.calls[-1].metadata["x-team"] == "blue"
        other.close()  # a copy does not close the shared channel
        assert client.chat.create(messages=USER).text == "Hello world"
        assert fake.servicer.calls[-1].metadata["authorization"] == "Bearer a"
        assert client.health()


def test_bad_params_fail_before_any_call() -> None:
    with sdk.MacaronClient("127.0.0.1:1") as client:
        with pytest.raises(ValueError, match="role"):
            client.chat.create(messages=[{"role": "robot", "content": "x"}])
        with pytest.raises(ValueError, match="image_url"):
            client.chat.create(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])
        with pytest.raises(ValueError, match="specialist"):
            client.chat.create(messages=USER, specialist="poet")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="printable ASCII"):  # gRPC metadata could not carry it
            client.chat.create(messages=USER, request_id="caf\u00e9")


def test_unreachable_router_is_a_connection_error_after_retries() -> None:
    with sdk.MacaronClient("127.0.0.1:1", max_retries=1, timeout=5) as client:
        start = time.monotonic()
        with pytest.raises(sdk.APIConnectionError):
            client.chat.create(messages=USER)
        assert time.monotonic() - start < 4
        assert not client.health(timeout=1)


def test_tls_with_a_private_ca(tmp_path: Path) -> None:
    """A throwaway CA (made with `cryptography`): the SDK trusts it, a plain or untrusting client gets nowhere,
    and with mutual TLS only a client presenting a certificate the CA signed is served."""
    from auth.certs import make_certs

    certs = make_certs(tmp_path)
    key, cert = certs.server_key, certs.server_cert
    from concurrent import futures

    from macaron.v1 import router_pb2_grpc

    from .fake_router import FakeRouter

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    router_pb2_grpc.add_RouterServicer_to_server(FakeRouter(), server)
    port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(key.read_bytes(), cert.read_bytes())]))
    mutual = grpc.ssl_server_credentials([(key.read_bytes(), cert.read_bytes())],
                                         root_certificates=certs.ca.read_bytes(), require_client_auth=True)
    mutual_port = server.add_secure_port("127.0.0.1:0", mutual)
    server.start()
    ca = certs.ca.read_bytes()
    try:
        with sdk.MacaronClient(f"localhost:{port}", root_certificates=ca, timeout=10) as client:
            assert client.tls and client.chat.create(messages=USER).text == "Hello world"
        with sdk.MacaronClient(f"localhost:{port}", timeout=3, max_retries=0) as plain:
            with pytest.raises(sdk.APIError):
                plain.chat.create(messages=USER)
        with sdk.MacaronClient(f"localhost:{port}", root_certificates=certs.other_ca.read_bytes(), timeout=3,
                               max_retries=0) as untrusting:
            with pytest.raises(sdk.APIConnectionError):
                untrusting.chat.create(messages=USER)
        with_cert = grpc.ssl_channel_credentials(ca, certs.client_key.read_bytes(), certs.client_cert.read_bytes())
        with sdk.MacaronClient(f"localhost:{mutual_port}", credentials=with_cert, timeout=10) as client:
            assert client.chat.create(messages=USER).text == "Hello world"
        with sdk.MacaronClient(f"localhost:{mutual_port}", root_certificates=ca, timeout=3, max_retries=0) as no_cert:
            with pytest.raises(sdk.APIConnectionError):
                no_cert.chat.create(messages=USER)
    finally:
        server.stop(0)
