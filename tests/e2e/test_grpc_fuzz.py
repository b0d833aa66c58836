"""Property-based fuzzing of the router's and the specialists' real gRPC servers (the session's
`macaron serve` stack): no message, however odd, gets UNKNOWN or INTERNAL, hangs, or takes a
server down.

Three kinds of input: well-typed messages with hostile values (every field of GenerateRequest:
out-of-range enums, NaN and huge numbers, lone surrogates are impossible in protobuf strings,
so odd Unicode instead, garbage JSON schemas, forged routes and replica hints); raw bytes that
are not a valid message at all; and odd call metadata. Each call has a deadline well above a
real answer's time, so a hang shows as DEADLINE_EXCEEDED and fails the test. Deterministic
(`derandomize`), bounded (a few hundred calls, small token budgets).
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from macaron.v1 import common_pb2, router_pb2, router_pb2_grpc, specialist_pb2_grpc

from .conftest import API_KEY, Stack

CLEAR = frozenset({
    grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED,
})
"""Answers a hostile caller may get; UNKNOWN/INTERNAL (a bug), DEADLINE_EXCEEDED (a hang) and
UNAVAILABLE (a crash) may not."""
CALL_DEADLINE_S = 30.0
BOUNDED = {"deadline": None, "derandomize": True, "database": None,
           "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]}

TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=24)
NAMES = st.one_of(TEXT, st.sampled_from(["get_weather", "", "a" * 65, "bad name!", "x-y_z"]))
JSON_TEXT = st.one_of(
    TEXT,
    st.sampled_from([
        "", "{}", "[]", "null", '{"type": "object"}', '{"type": "object", "properties": {"a": {"type": "string"}}}',
        '{"type": "objec"}', '{"$ref": "#/nope"}', '{"type": "string", "pattern": "("}', '{"enum": []}',
        '{"type": "object", "properties": {"a": {"type": "integer", "minimum": 5, "maximum": 1}}, "required": ["a"]}',
        '{"type": "array", "items": {"$ref": "#"}}', "[" * 2000, '{"a": ' * 300 + "1" + "}" * 300,
    ]),
)
ENUMS = st.integers(min_value=-3, max_value=9)  # proto3 enums are open: unknown numbers arrive as they are
INT32 = st.one_of(st.integers(min_value=-(2**31), max_value=2**31 - 1), st.integers(min_value=-3, max_value=40))
DOUBLE = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(min_value=-2, max_value=3))


VALID_NAMES = st.sampled_from(["get_weather", "search", "run_code"])
ROLES = st.sampled_from([common_pb2.ROLE_SYSTEM, common_pb2.ROLE_DEVELOPER, common_pb2.ROLE_USER, common_pb2.ROLE_ASSISTANT])


@st.composite
def well_formed(draw: st.DrawFn, specialist: int) -> common_pb2.GenerateRequest:
    """A request the servers accept, so that the hostile edits below reach deep code, not the first check."""
    r = common_pb2.GenerateRequest(session_id=draw(st.one_of(st.just(""), TEXT)), specialist=specialist)
    for role in draw(st.lists(ROLES, max_size=2)):
        r.messages.add(role=role, content=draw(TEXT))
    r.messages.add(role=common_pb2.ROLE_USER, content=draw(TEXT))
    for name in draw(st.lists(VALID_NAMES, max_size=2, unique=True)):
        tool = r.tools.add(type="function")
        tool.function.name = name
        tool.function.parameters_json = draw(JSON_TEXT)
    choice = draw(st.sampled_from(["none", "auto", "never", "required", "function"]))
    if r.tools and choice in ("auto", "never", "required"):
        r.tool_choice.mode = {"auto": common_pb2.TOOL_CHOICE_MODE_AUTO, "never": common_pb2.TOOL_CHOICE_MODE_NONE,
                              "required": common_pb2.TOOL_CHOICE_MODE_REQUIRED}[choice]
    elif r.tools and choice == "function":
        r.tool_choice.function_name = r.tools[0].function.name
    if not r.tools and draw(st.booleans()):
        r.response_format.type = draw(st.sampled_from([1, 2, 3]))
        if r.response_format.type == 3:
            r.response_format.json_schema.name = "answer"
            r.response_format.json_schema.schema_json = draw(JSON_TEXT)
    r.sampling.max_new_tokens = draw(st.integers(min_value=1, max_value=6))
    r.sampling.temperature = draw(st.floats(min_value=0, max_value=1.5))
    return r


def _mutations(draw: st.DrawFn, r: common_pb2.GenerateRequest) -> None:
    """Zero to three hostile edits of one request."""
    for kind in draw(st.lists(st.sampled_from(MUTATIONS), max_size=3)):
        s = r.sampling
        if kind in ("role", "long") and not r.messages:
            continue
        if kind == "role":
            r.messages[draw(st.integers(0, len(r.messages) - 1))].role = draw(ENUMS)
        elif kind == "no_messages":
            del r.messages[:]
        elif kind == "tool_calls":
            m = r.messages.add(role=draw(ENUMS), content=draw(TEXT), tool_call_id=draw(TEXT))
            call = m.tool_calls.add(id=draw(TEXT), type=draw(st.sampled_from(["", "function", "nope"])))
            call.function.name, call.function.arguments = draw(NAMES), draw(JSON_TEXT)
            r.messages.add(role=common_pb2.ROLE_TOOL, content=draw(TEXT), tool_call_id=draw(TEXT))
        elif kind == "tool_name":
            tool = r.tools.add(type=draw(st.sampled_from(["", "function", "retrieval"])))
            tool.function.name, tool.function.parameters_json = draw(NAMES), draw(JSON_TEXT)
        elif kind == "tool_choice":
            if draw(st.booleans()):
                r.tool_choice.mode = draw(ENUMS)
            else:
                r.tool_choice.function_name = draw(NAMES)
        elif kind == "response_format":
            r.response_format.type = draw(ENUMS)
            r.response_format.json_schema.schema_json = draw(JSON_TEXT)
        elif kind == "budget":
            s.max_new_tokens = draw(INT32)
            if draw(st.booleans()):
                s.min_new_tokens = draw(INT32)
        elif kind == "floats":
            field = draw(st.sampled_from(["temperature", "top_p", "min_p", "frequency_penalty", "presence_penalty",
                                          "repetition_penalty"]))
            setattr(s, field, draw(DOUBLE))
        elif kind == "ints":
            s.top_k = draw(INT32)
            s.seed = draw(st.integers(min_value=-(2**63), max_value=2**63 - 1))
        elif kind == "stop":
            s.stop.extend(draw(st.lists(st.one_of(TEXT, st.just(""), st.just("x" * 5000)), max_size=40)))
        elif kind == "specialist":
            r.specialist = draw(ENUMS)
        elif kind == "hint":
            r.engine_replica_hint = draw(st.one_of(TEXT, st.sampled_from(
                ["http://169.254.169.254:80", "http://127.0.0.1:1", "file:///etc/passwd", "http://[::1"])))
        elif kind == "route":  # forged: callers must leave it empty
            r.route.specialist, r.route.adapter = draw(ENUMS), draw(TEXT)
            r.route.adapter_version, r.route.replica = draw(TEXT), draw(TEXT)
            r.route.confidence = draw(DOUBLE)
        elif kind == "ids":
            r.request_id, r.session_id = draw(TEXT), draw(st.text(max_size=300, alphabet=st.characters(codec="utf-8")))
            for key, value in draw(st.dictionaries(TEXT, TEXT, max_size=3)).items():
                r.metadata[key] = value
        elif kind == "long":
            r.messages[-1].content = draw(st.sampled_from(["word " * 20_000, "\u0000" * 3000, "🙂" * 5000]))


MUTATIONS = ["role", "no_messages", "tool_calls", "tool_name", "tool_choice", "response_format", "budget", "floats",
             "ints", "stop", "specialist", "hint", "route", "ids", "long"]


@st.composite
def requests(draw: st.DrawFn, specialist: int = 0) -> common_pb2.GenerateRequest:
    r = draw(well_formed(specialist))
    _mutations(draw, r)
    return r


@pytest.fixture(scope="module")
def channels(stack: Stack):
    config = yaml.safe_load((Path(stack.log).parent / "macaron.yaml").read_text())
    router = grpc.insecure_channel(stack.router_target)
    specialists = {name: grpc.insecure_channel(f"127.0.0.1:{config['specialists'][name]['port']}")
                   for name in ("chat", "agent", "code", "ui")}
    yield router, specialists
    router.close()
    for channel in specialists.values():
        channel.close()


def _drain(call) -> grpc.StatusCode:
    try:
        for _ in call:
            pass
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def _check(code: grpc.StatusCode, call_or_exc, what: object) -> None:
    details = getattr(call_or_exc, "details", lambda: "")()
    event(f"{code.name}: {(details or '')[:40]}")  # `pytest --hypothesis-show-statistics` shows how deep the fuzzing went
    assert code in CLEAR, f"{code.name} ({details!r}) for {what}"


AUTH = (("authorization", f"Bearer {API_KEY}"),)


@settings(max_examples=120, **BOUNDED)
@given(request=requests())
def test_router_generate_answers_every_message_clearly(channels, request: common_pb2.GenerateRequest) -> None:
    router, _ = channels
    call = router_pb2_grpc.RouterStub(router).Generate(request, timeout=CALL_DEADLINE_S, metadata=AUTH)
    _check(_drain(call), call, request)


@settings(max_examples=40, **BOUNDED)
@given(request=requests())
def test_router_classify_answers_every_message_clearly(channels, request: common_pb2.GenerateRequest) -> None:
    router, _ = channels
    try:
        router_pb2_grpc.RouterStub(router).Classify(router_pb2.ClassifyRequest(request=request),
                                                    timeout=CALL_DEADLINE_S, metadata=AUTH)
        code, err = grpc.StatusCode.OK, None
    except grpc.RpcError as exc:
        code, err = exc.code(), exc
    _check(code, err, request)


@settings(max_examples=120, **BOUNDED)
@given(data=st.data(), name=st.sampled_from(["chat", "agent", "code", "ui"]))
def test_specialists_answer_every_message_clearly(channels, data: st.DataObject, name: str) -> None:
    _, specialists = channels
    kind = common_pb2.SpecialistKind.Value(f"SPECIALIST_KIND_{name.upper()}")
    request = data.draw(requests(kind))
    call = specialist_pb2_grpc.SpecialistStub(specialists[name]).Generate(request, timeout=CALL_DEADLINE_S)
    _check(_drain(call), call, (name, request))


METHODS = ["/macaron.v1.Router/Generate", "/macaron.v1.Router/Classify", "/macaron.v1.Specialist/Generate"]


@settings(max_examples=80, **BOUNDED)
@given(payload=st.one_of(st.binary(max_size=64), st.sampled_from([b"\xff" * 8, b"\x1a\x05\x12\x03\xff\xfe\xfd", b"\x08"])),
       method=st.sampled_from(METHODS))
def test_bytes_that_are_no_message_are_invalid_argument(channels, payload: bytes, method: str) -> None:
    router, specialists = channels
    channel = specialists["code"] if "Specialist" in method else router
    try:
        if method.endswith("Classify"):
            channel.unary_unary(method)(payload, timeout=CALL_DEADLINE_S, metadata=AUTH)
            code, err = grpc.StatusCode.OK, None
        else:
            call = channel.unary_stream(method)(payload, timeout=CALL_DEADLINE_S, metadata=AUTH)
            code, err = _drain(call), call
    except grpc.RpcError as exc:
        code, err = exc.code(), exc
    _check(code, err, (method, payload))


@settings(max_examples=40, **BOUNDED)
@given(metadata=st.lists(st.tuples(
    st.sampled_from(["authorization", "x-session-id", "x-request-id", "traceparent", "tracestate", "grpc-timeout-x",
                     "x-macaron-api-key", "baggage"]),
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7e), max_size=40)), max_size=4),
    with_key=st.booleans())
def test_odd_metadata_gets_a_clear_answer(channels, metadata: list[tuple[str, str]], with_key: bool) -> None:
    router, _ = channels
    request = common_pb2.GenerateRequest(messages=[common_pb2.ChatMessage(role=common_pb2.ROLE_USER, content="hi")],
                                         sampling=common_pb2.SamplingParams(max_new_tokens=2))
    metadata = [*metadata, *AUTH] if with_key and all(k != "authorization" for k, _ in metadata) else metadata
    call = router_pb2_grpc.RouterStub(router).Generate(request, timeout=CALL_DEADLINE_S, metadata=tuple(metadata))
    _check(_drain(call), call, metadata)


def test_servers_are_still_serving_after_the_fuzzing(channels) -> None:
    router, specialists = channels
    for channel, service in ((router, "macaron.v1.Router"),
                             *((channel, "macaron.v1.Specialist") for channel in specialists.values())):
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING, service
