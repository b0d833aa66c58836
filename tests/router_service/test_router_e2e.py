"""The router end to end: real gRPC, real Redis, real specialists over two real embedded engines.

Decisions come from the keyword classifier of conftest.py (code 0.95 for "python", chat 0.6 for
"thanks", chat 0.9 for "hello", ...), with switch threshold 0.8 and judge threshold 0.5.
"""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from macaron.router.server import SERVICE_NAME
from macaron.v1 import common_pb2 as pb
from macaron.v1 import router_pb2, specialist_pb2_grpc
from specialist.helpers import tools, user

pytestmark = pytest.mark.slow

GREEDY = pb.SamplingParams(max_new_tokens=4, temperature=0.0)
LONG_CONTEXT = " ".join(f"Fact {i}: the archive holds record {i * 7} for the harbour office." for i in range(30))


def req(*texts: str, session: str = "", **fields) -> pb.GenerateRequest:
    msgs = [user(t) for t in texts] if texts else []
    fields.setdefault("sampling", GREEDY)
    return pb.GenerateRequest(messages=msgs, session_id=session, **fields)


async def generate(stub, request: pb.GenerateRequest, metadata=(), timeout: float = 60.0) -> list[pb.GenerateChunk]:
    return [c async for c in stub.Generate(request, timeout=timeout, metadata=metadata)]


async def error_of(coro) -> grpc.aio.AioRpcError:
    try:
        await coro
    except grpc.aio.AioRpcError as exc:
        return exc
    raise AssertionError("the call succeeded; an error was expected")


def reason(chunks) -> str:
    return pb.RouteReason.Name(chunks[0].route.reason)


async def test_generate_streams_with_the_route_in_the_first_chunk(routers, engine_urls) -> None:
    _, stub = await routers.start()
    chunks = await generate(stub, req("write a python function that adds two numbers"))
    route = chunks[0].route
    assert route.specialist == pb.SPECIALIST_KIND_CODE and route.reason == pb.ROUTE_REASON_CLASSIFIER
    assert route.confidence == pytest.approx(0.95) and route.adapter == "code"
    assert route.replica in engine_urls
    assert route.timing.servicer_ms > 0 and route.timing.classify_ms > 0  # where the router's time went
    assert chunks[-1].finish.reason in (pb.FINISH_REASON_LENGTH, pb.FINISH_REASON_STOP)
    assert chunks[-1].usage.completion_tokens > 0
    forced = await generate(stub, req("write a python function", specialist=pb.SPECIALIST_KIND_AGENT))
    assert forced[0].route.specialist == pb.SPECIALIST_KIND_AGENT and reason(forced) == "ROUTE_REASON_EXPLICIT"
    assert forced[0].route.adapter == "agent"


async def test_session_stickiness_and_switch_threshold(routers) -> None:
    _, stub = await routers.start()
    turn1 = await generate(stub, req("write a python function", session="s-sticky"))
    assert turn1[0].route.specialist == pb.SPECIALIST_KIND_CODE
    # "thanks" is chat at 0.6 < 0.8: the session stays with code
    turn2 = await generate(stub, req("write a python function", "thanks", session="s-sticky"))
    assert turn2[0].route.specialist == pb.SPECIALIST_KIND_CODE and reason(turn2) == "ROUTE_REASON_SESSION"
    # "hello" is chat at 0.9 >= 0.8, but two words are too few to carry a domain: it stays
    short = await generate(stub, req("write a python function", "thanks", "hello there", session="s-sticky"))
    assert short[0].route.specialist == pb.SPECIALIST_KIND_CODE and "too short" in short[0].route.detail
    # a real turn confidently in another domain switches the session
    turn3 = await generate(stub, req("write a python function", "thanks", "hello there, how are you", session="s-sticky"))
    assert turn3[0].route.specialist == pb.SPECIALIST_KIND_CHAT and reason(turn3) == "ROUTE_REASON_CLASSIFIER"
    turn4 = await generate(stub, req("thanks", session="s-sticky"))
    assert turn4[0].route.specialist == pb.SPECIALIST_KIND_CHAT and reason(turn4) == "ROUTE_REASON_SESSION"
    # the same session id under another key owner is another session (namespacing): no stickiness there
    other = await routers.servers[0].core.read_session("someone-else", "s-sticky")
    assert other is None


async def test_no_switch_inside_a_tool_loop(routers) -> None:
    _, stub = await routers.start()
    ask = user("what is the weather in Paris")
    turn1 = await generate(stub, pb.GenerateRequest(messages=[ask], tools=tools(), session_id="s-tools", sampling=GREEDY))
    assert turn1[0].route.specialist == pb.SPECIALIST_KIND_AGENT
    call = pb.ToolCall(id="call_1", type="function", function=pb.FunctionCall(
        name="get_weather", arguments=json.dumps({"city": "Paris", "unit": "celsius", "days": 1})))
    # the tool result reads like chat at 0.9, but the loop is open: stay with agent
    result = pb.ChatMessage(role=pb.ROLE_TOOL, content="hello, how are you: 21 degrees", tool_call_id="call_1")
    loop = pb.GenerateRequest(
        messages=[ask, pb.ChatMessage(role=pb.ROLE_ASSISTANT, tool_calls=[call]), result],
        tools=tools(), session_id="s-tools", sampling=GREEDY,
    )
    turn2 = await generate(stub, loop)
    assert turn2[0].route.specialist == pb.SPECIALIST_KIND_AGENT and reason(turn2) == "ROUTE_REASON_SESSION"
    assert "tool loop" in turn2[0].route.detail
    # once the loop is closed, the same text does switch
    closed = pb.GenerateRequest(messages=[*loop.messages, pb.ChatMessage(role=pb.ROLE_ASSISTANT, content="21 degrees"),
                                          user("hello, how are you")], session_id="s-tools", sampling=GREEDY)
    turn3 = await generate(stub, closed)
    assert turn3[0].route.specialist == pb.SPECIALIST_KIND_CHAT


async def test_affinity_sends_a_repeated_prefix_to_the_replica_that_served_it(routers, engine_urls) -> None:
    server, stub = await routers.start()
    served: dict[str, str] = {}
    for i in range(4):  # four distinct long prompts, no session: placement by prefix and load only
        prompt = f"Document {i}. {LONG_CONTEXT} Tell me about document {i}."
        first = await generate(stub, req(prompt))
        served[prompt] = first[0].route.replica
        await server.core.flush()
    assert set(served.values()) <= set(engine_urls)
    for prompt, replica in served.items():  # the same prefix, a new question, another session each time
        again = await generate(stub, req(prompt, "and a follow-up question", session=f"new-{hash(prompt)}"))
        assert again[0].route.replica == replica
        assert again[-1].usage.cached_tokens > 0  # the engine's own prefix cache served it


async def test_two_routers_sharing_redis_make_the_same_choices(routers) -> None:
    a_server, a = await routers.start(router_id="router-a")
    b_server, b = await routers.start(router_id="router-b")
    # a session started on A continues on B
    turn1 = await generate(a, req("write a python function", session="s-shared"))
    await a_server.core.flush()
    turn2 = await generate(b, req("write a python function", "thanks", session="s-shared"))
    assert turn2[0].route.specialist == pb.SPECIALIST_KIND_CODE and reason(turn2) == "ROUTE_REASON_SESSION"
    assert turn2[0].route.replica == turn1[0].route.replica
    # a prefix served through A is placed on the same replica by B
    for i in range(3):
        prompt = f"Shared document {i}. {LONG_CONTEXT}"
        via_a = await generate(a, req(prompt))
        await a_server.core.flush()
        via_b = await generate(b, req(prompt, "follow-up"))
        assert via_b[0].route.replica == via_a[0].route.replica
        await b_server.core.flush()
    # and both decide alike
    ca = await a.Classify(router_pb2.ClassifyRequest(request=req("thanks", session="s-shared")), timeout=30)
    cb = await b.Classify(router_pb2.ClassifyRequest(request=req("thanks", session="s-shared")), timeout=30)
    assert ca.route == cb.route and ca.route.reason == pb.ROUTE_REASON_SESSION
    assert [p.probability for p in ca.probabilities] == [p.probability for p in cb.probabilities]


async def test_a_session_ended_through_one_router_is_forgotten_and_counted_out_in_the_other(routers) -> None:
    """EndSession: the session is forgotten (the next turn starts afresh) and stops counting as live on its replica,
    in the router that counted it too, at once rather than one to two spread windows later."""
    from macaron.router.placement.snapshot import now_ms

    a_server, a = await routers.start(router_id="router-a")
    b_server, b = await routers.start(router_id="router-b")
    turn = await generate(b, req("write a python function", session="s-end"))
    replica = turn[0].route.replica
    await b_server.core.flush()
    assert b_server.core.snapshots.own_sessions(now_ms())[replica] == 1
    reply = await a.EndSession(router_pb2.EndSessionRequest(session_id="s-end"), timeout=10)
    assert reply.ended
    for _ in range(100):  # B hears of it through the placement store's channel
        if b_server.core.snapshots.own_sessions(now_ms())[replica] == 0:
            break
        await asyncio.sleep(0.05)
    assert b_server.core.snapshots.own_sessions(now_ms())[replica] == 0
    assert await b_server.core.read_session("dev", "s-end") is None
    after = await b.Classify(router_pb2.ClassifyRequest(request=req("thanks", session="s-end")), timeout=30)
    assert after.route.reason != pb.ROUTE_REASON_SESSION  # a new conversation, not the ended one's code session
    again = await a.EndSession(router_pb2.EndSessionRequest(session_id="s-end"), timeout=10)
    assert not again.ended  # nothing left to end: a retry after a lost reply is harmless
    for bad in ("", "x" * 300):
        error = await error_of(a.EndSession(router_pb2.EndSessionRequest(session_id=bad), timeout=10))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "session_id" in error.details()


async def test_classify_and_the_judge(routers, settings) -> None:
    _, stub = await routers.start()
    sure = await stub.Classify(router_pb2.ClassifyRequest(request=req("write a python function")), timeout=30)
    assert sure.route.reason == pb.ROUTE_REASON_CLASSIFIER and sure.route.specialist == pb.SPECIALIST_KIND_CODE
    assert [p.specialist for p in sure.probabilities] == [1, 2, 3, 4]
    assert sum(p.probability for p in sure.probabilities) == pytest.approx(1.0)
    assert sure.decision_ms > 0
    # no rule matches: chat at 0.3 < 0.5, the chat adapter judges on the engine
    judged = await stub.Classify(router_pb2.ClassifyRequest(request=req("zebra quartz")), timeout=30)
    assert judged.route.reason == pb.ROUTE_REASON_JUDGE, judged.route.detail
    assert judged.route.specialist in (1, 2, 3, 4)
    # a judge that cannot answer in time: chat
    hurried = settings.model_copy(update={"router": settings.router.model_copy(update={"judge_timeout_s": 0.0005})})
    _, quick = await routers.start(settings=hurried)
    fallback = await quick.Classify(router_pb2.ClassifyRequest(request=req("zebra quartz")), timeout=30)
    assert fallback.route.reason == pb.ROUTE_REASON_DEFAULT and fallback.route.specialist == pb.SPECIALIST_KIND_CHAT
    assert "timed out" in fallback.route.detail


async def test_the_judge_gets_the_requests_remaining_time_capped_by_its_timeout(routers) -> None:
    """judge_timeout_s is 10 s here: a request with (almost) no time left does not give the judge 10 s."""
    import time

    from macaron.prompting import ChatRequest, Message
    from macaron.router.routing import RouteRequest

    server, _ = await routers.start()
    chat = ChatRequest((Message("user", "zebra quartz"),))  # unsure: the judge is asked
    judged, _ = await server.core.decide(RouteRequest(chat, deadline=time.monotonic() + 60.0))
    assert judged.reason == "judge", judged.detail  # time enough: the judge answers
    spent, _ = await server.core.decide(RouteRequest(chat, deadline=time.monotonic() - 1.0))
    assert (spent.reason, spent.specialist) == ("fallback", "chat") and "no time left" in spent.detail, spent.detail
    hurried, _ = await server.core.decide(RouteRequest(chat, deadline=time.monotonic() + 0.0005))
    assert (hurried.reason, hurried.specialist) == ("fallback", "chat") and "timed out" in hurried.detail, hurried.detail


async def test_bad_input_is_invalid_argument(routers) -> None:
    _, stub = await routers.start()
    bad = [
        req(),  # no messages
        pb.GenerateRequest(messages=[pb.ChatMessage(content="no role")]),
        req("hi", specialist=9),
        req("hi", engine_replica_hint="http://10.9.9.9:1"),
        req("hi", session="x" * 300),
    ]
    for request in bad:
        err = await error_of(generate(stub, request))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (request, err.details())
    err = await error_of(stub.Classify(router_pb2.ClassifyRequest(request=req()), timeout=10))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_health_and_reflection(routers) -> None:
    server, _ = await routers.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        health = health_pb2_grpc.HealthStub(channel)
        for name in (SERVICE_NAME, f"{SERVICE_NAME}/store", ""):
            answer = await health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

        stream = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5)
        names = {s.name async for r in stream for s in r.list_services_response.service}
        assert SERVICE_NAME in names
    finally:
        await channel.close()


async def test_next_turn_reads_the_session_its_answer_wrote_even_when_the_store_is_slow(routers) -> None:
    """Read your own writes: the session write runs in the background (off the first token's path),
    but the stream's last chunk waits for it, so a client that sends its next turn at once finds it."""
    server, stub = await routers.start()
    sessions = server.core.sessions
    put = sessions.put

    async def slow_put(*args, **kwargs):
        await asyncio.sleep(0.1)  # a store round trip under load: slower than the tiny model's answer
        return await put(*args, **kwargs)

    sessions.put = slow_put
    try:
        turn1 = await generate(stub, req("write a python function", session="s-ryw"))
        assert turn1[0].route.specialist == pb.SPECIALIST_KIND_CODE
        turn2 = await generate(stub, req("write a python function", "thanks", session="s-ryw"))
        assert reason(turn2) == "ROUTE_REASON_SESSION" and turn2[0].route.specialist == pb.SPECIALIST_KIND_CODE
    finally:
        sessions.put = put


class _RecordingSpecialist(specialist_pb2_grpc.SpecialistServicer):
    """Keeps what the router forwarded and answers one token."""

    def __init__(self) -> None:
        self.requests: list[pb.GenerateRequest] = []

    async def Generate(self, request, context):  # noqa: N802
        self.requests.append(request)
        yield pb.GenerateChunk(request_id=request.request_id, route=request.route, text="ok")
        yield pb.GenerateChunk(finish=pb.Finish(reason=pb.FINISH_REASON_STOP),
                               usage=pb.Usage(prompt_tokens=len(request.routed_prompt.token_ids), completion_tokens=1))


async def test_the_router_hands_its_rendered_prompt_on_and_never_a_callers(routers, settings) -> None:
    """Placement renders and tokenizes the prompt as the code specialist will; the forwarded request carries those
    ids with the profile's render key, so the specialist need not do it again. Ids a caller put in the request are
    replaced, never passed on."""
    from macaron.prompting import render, render_key
    from macaron.prompting.convert import request_from_proto
    from macaron.prompting.tokenizer import load_light_tokenizer
    from macaron.specialist.profiles import load_profile

    tokenizer = load_light_tokenizer(settings.specialists.tokenizer_path)  # as `macaron router` loads it
    fake = _RecordingSpecialist()
    server = grpc.aio.server()
    specialist_pb2_grpc.add_SpecialistServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        pools = settings.router.pools.model_copy(update={"code": [f"127.0.0.1:{port}"]})
        recording = settings.model_copy(update={"router": settings.router.model_copy(update={"pools": pools})})
        _, stub = await routers.start(settings=recording, tokenizer=tokenizer)
        sent = req("write a python function that adds two numbers")
        sent.routed_prompt.token_ids.extend([1, 2, 3])
        sent.routed_prompt.render_key = "a caller's guess"
        chunks = await generate(stub, sent)
        assert chunks[0].route.specialist == pb.SPECIALIST_KIND_CODE
        profile = load_profile(settings.specialists, "code")
        expected = tokenizer(render(request_from_proto(sent), profile, tokenizer), add_special_tokens=False)["input_ids"]
        (forwarded,) = fake.requests
        assert list(forwarded.routed_prompt.token_ids) == list(expected)
        assert forwarded.routed_prompt.render_key == render_key(profile, tokenizer)
    finally:
        await server.stop(0)
