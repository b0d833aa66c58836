"""A small scripted macaron.v1.Router for unit tests of the SDK and the gateway's mapping.

The newest user message picks the behaviour:

- `fail:CODE` aborts with that gRPC status (`fail:RESOURCE_EXHAUSTED` carries RetryInfo 2.5 s,
  `fail:context` is INVALID_ARGUMENT with ErrorInfo reason context_length_exceeded);
- `limited:N:MS` answers RESOURCE_EXHAUSTED (RetryInfo MS milliseconds) to the first N attempts, then works;
- `flaky:N` answers UNAVAILABLE to the first N attempts of this request id, then works;
- `midfail` streams one text chunk, then fails with INTERNAL;
- `slow` streams a chunk every 50 ms for 100 s; `cancelled` is set only when the client cancels it
  before its deadline (not when it ends or times out);
- `tools` answers one tool call, `two tools` two of them; `abort` finishes with FINISH_REASON_ABORT;
- anything else: route, "Hello", " world", finish STOP with usage (cached_tokens 3); with `logprobs`,
  each word's chunk is preceded by a chunk with its logprob (and `top_logprobs` alternatives).

A plain prompt (`prompt` set, completions) is read as the newest user message.

Every call's request and metadata are recorded in `calls`.
"""

from __future__ import annotations

import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from macaron.v1 import common_pb2 as pb
from macaron.v1 import router_pb2, router_pb2_grpc

ROUTE_MS = 1.5
"""What the fake says routing took (the real router reports its decide-and-place time on each route)."""

KINDS = {"chat": pb.SPECIALIST_KIND_CHAT, "agent": pb.SPECIALIST_KIND_AGENT, "code": pb.SPECIALIST_KIND_CODE,
         "ui": pb.SPECIALIST_KIND_UI}


@dataclass
class Call:
    request: pb.GenerateRequest
    metadata: dict[str, str]
    deadline_s: float | None = None
    """The call's gRPC deadline as it arrived (seconds left), None without one."""


@dataclass
class FakeRouter(router_pb2_grpc.RouterServicer):
    calls: list[Call] = field(default_factory=list)
    attempts: dict[str, int] = field(default_factory=dict)
    cancelled: threading.Event = field(default_factory=threading.Event)
    sessions: dict[str, int] = field(default_factory=dict)

    def _decide(self, request: pb.GenerateRequest) -> pb.RouteDecision:
        if request.specialist:
            return pb.RouteDecision(specialist=request.specialist, reason=pb.ROUTE_REASON_EXPLICIT, confidence=1.0,
                                    route_ms=ROUTE_MS)
        if request.session_id in self.sessions:
            return pb.RouteDecision(specialist=self.sessions[request.session_id], reason=pb.ROUTE_REASON_SESSION,
                                    confidence=0.9, route_ms=ROUTE_MS)
        text = request.messages[-1].content if request.messages else ""
        kind = pb.SPECIALIST_KIND_CODE if "python" in text.lower() else pb.SPECIALIST_KIND_CHAT
        return pb.RouteDecision(specialist=kind, reason=pb.ROUTE_REASON_CLASSIFIER, confidence=0.75, detail="fake",
                                route_ms=ROUTE_MS)

    def Generate(self, request: pb.GenerateRequest, context: grpc.ServicerContext) -> Any:
        metadata = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
        self.calls.append(Call(request, metadata, context.time_remaining()))
        text = next((m.content for m in reversed(request.messages) if m.role == pb.ROLE_USER), "")
        if request.HasField("prompt"):
            text = request.prompt
        rid = request.request_id
        if text.startswith("fail:"):
            _abort(context, text.split(":", 1)[1])
        if text.startswith("limited:"):  # limited:N:MS: RESOURCE_EXHAUSTED (RetryInfo MS) to the first N attempts
            _, times, delay_ms = text.split(":")
            self.attempts[rid] = self.attempts.get(rid, 0) + 1
            if self.attempts[rid] <= int(times):
                _rate_limited(context, int(delay_ms))
        if text.startswith("flaky:"):
            self.attempts[rid] = self.attempts.get(rid, 0) + 1
            if self.attempts[rid] <= int(text.split(":")[1]):
                context.abort(grpc.StatusCode.UNAVAILABLE, "no specialist replica answers")
        route = self._decide(request)
        if request.session_id:
            self.sessions[request.session_id] = route.specialist
        route.adapter = {v: k for k, v in KINDS.items()}[route.specialist]
        route.adapter_version = "v1"
        route.replica = "http://127.0.0.1:30000"
        yield pb.GenerateChunk(request_id=rid, route=route)
        if text == "slow":
            remaining = context.time_remaining()
            deadline = time.monotonic() + remaining if remaining is not None else float("inf")

            def ended() -> None:  # it never ends by itself within the tests: the client, or its deadline, ended it
                if time.monotonic() < deadline - 0.1:
                    self.cancelled.set()

            context.add_callback(ended)
            for i in range(2000):
                if not context.is_active():
                    return
                yield pb.GenerateChunk(request_id=rid, text=f"t{i} ")
                time.sleep(0.05)
            return
        if text == "midfail":
            yield pb.GenerateChunk(request_id=rid, text="partial")
            context.abort(grpc.StatusCode.INTERNAL, "the engine failed mid-stream")
        if text == "tools":
            yield pb.GenerateChunk(request_id=rid, tool_calls=[
                pb.ToolCallDelta(index=0, id="call_1", type="function", name="get_weather", arguments='{"city": '),
            ])
            yield pb.GenerateChunk(request_id=rid, tool_calls=[pb.ToolCallDelta(index=0, arguments='"Paris"}')])
            yield _done(rid, pb.FINISH_REASON_TOOL_CALLS)
            return
        if text == "two tools":
            for index, city in enumerate(("Paris", "Oslo")):
                yield pb.GenerateChunk(request_id=rid, tool_calls=[
                    pb.ToolCallDelta(index=index, id=f"call_{index + 1}", type="function", name="get_weather",
                                     arguments=f'{{"city": "{city}"}}'),
                ])
            yield _done(rid, pb.FINISH_REASON_TOOL_CALLS)
            return
        if text == "abort":
            yield pb.GenerateChunk(request_id=rid, text="cut")
            yield _done(rid, pb.FINISH_REASON_ABORT)
            return
        for i, word in enumerate(("Hello", " world")):
            if request.logprobs:
                yield pb.GenerateChunk(request_id=rid, logprobs=[_logprob(word, -0.5 - i, request.top_logprobs)])
            yield pb.GenerateChunk(request_id=rid, text=word)
        yield _done(rid, pb.FINISH_REASON_STOP)

    def Classify(self, request: router_pb2.ClassifyRequest, context: grpc.ServicerContext) -> router_pb2.ClassifyResponse:
        metadata = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
        self.calls.append(Call(request.request, metadata))
        route = self._decide(request.request)
        probs = [router_pb2.SpecialistProbability(specialist=k, probability=0.75 if k == route.specialist else 0.25 / 3)
                 for k in KINDS.values()]
        return router_pb2.ClassifyResponse(route=route, probabilities=probs, decision_ms=0.2)


    def EndSession(self, request: router_pb2.EndSessionRequest,
                   context: grpc.ServicerContext) -> router_pb2.EndSessionResponse:
        """As the router: INVALID_ARGUMENT for an empty id, `ended` false when there was no such session."""
        if not request.session_id:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "session_id is empty")
        return router_pb2.EndSessionResponse(ended=self.sessions.pop(request.session_id, None) is not None)


def _logprob(token: str, logprob: float, top: int) -> pb.TokenLogprob:
    alternatives = [pb.TopLogprob(token=token, logprob=logprob, bytes=token.encode())]
    alternatives += [pb.TopLogprob(token=f"alt{k}", logprob=logprob - k, bytes=f"alt{k}".encode()) for k in range(1, top)]
    return pb.TokenLogprob(token=token, logprob=logprob, bytes=token.encode(), top_logprobs=alternatives[:top])


def _done(rid: str, reason: int) -> pb.GenerateChunk:
    return pb.GenerateChunk(request_id=rid, finish=pb.Finish(reason=reason),
                            usage=pb.Usage(prompt_tokens=12, completion_tokens=2, cached_tokens=3))


def _abort(context: grpc.ServicerContext, what: str) -> None:
    if what == "context":
        status = status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message="the prompt is over the context limit")
        detail = any_pb2.Any()
        detail.Pack(error_details_pb2.ErrorInfo(reason="CONTEXT_LENGTH_EXCEEDED", domain="macaron"))
        status.details.append(detail)
        context.abort_with_status(rpc_status.to_status(status))
    code = grpc.StatusCode[what]
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        _rate_limited(context, 2500)
    context.abort(code, f"fake {what}")


def _rate_limited(context: grpc.ServicerContext, delay_ms: int) -> None:
    status = status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED, message="rate limit exceeded")
    detail = any_pb2.Any()
    delay = duration_pb2.Duration()
    delay.FromMilliseconds(delay_ms)
    detail.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
    status.details.append(detail)
    context.abort_with_status(rpc_status.to_status(status))


class FakeRouterServer:
    """The fake on a loopback port, with the standard health service (SERVING)."""

    def __init__(self) -> None:
        self.servicer = FakeRouter()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=16), options=[("grpc.so_reuseport", 0)])
        router_pb2_grpc.add_RouterServicer_to_server(self.servicer, self.server)
        self.health = health.HealthServicer()
        self.health.set("macaron.v1.Router", health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.target = f"127.0.0.1:{self.port}"

    def __enter__(self) -> FakeRouterServer:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop(0)
