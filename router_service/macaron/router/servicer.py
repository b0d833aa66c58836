"""The `macaron.v1.Router` servicer: authenticate, validate, route (RoutingCore), forward (Forwarder), stream.

Thin: protobuf ↔ domain and the status mapping live here, nothing else. API keys come in the
metadata (`authorization: Bearer <key>` or `x-api-key`) and go through the shared
`macaron.auth.Guard`. Statuses: UNAUTHENTICATED (key), RESOURCE_EXHAUSTED with
google.rpc.RetryInfo (over the key's limit), INVALID_ARGUMENT (bad request), and the
specialist's own status for anything after routing (passed through with its trailers).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import AsyncIterator

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from opentelemetry import trace

from macaron import telemetry
from macaron.auth import AuthError, Guard, Lease, Principal, RateLimitedError
from macaron.auth.guard import NO_LEASE
from macaron.ports import SPECIALISTS
from macaron.prompting.convert import request_from_proto
from macaron.prompting.messages import RequestError
from macaron.router.decision import Decision
from macaron.router.forwarder import Forwarder
from macaron.router.routing import AdmitOnRead, InvalidHintError, Route, RouteRequest, RoutingCore
from macaron.router.sessions import MAX_SESSION_ID_LENGTH
from macaron.store import Admission, AdmitResult, StoreUnavailableError
from macaron.v1 import common_pb2 as pb
from macaron.v1 import router_pb2, router_pb2_grpc

log = logging.getLogger(__name__)

KIND_BY_NAME: dict[str, int] = {
    "chat": pb.SPECIALIST_KIND_CHAT, "agent": pb.SPECIALIST_KIND_AGENT,
    "code": pb.SPECIALIST_KIND_CODE, "ui": pb.SPECIALIST_KIND_UI,
}
NAME_BY_KIND = {v: k for k, v in KIND_BY_NAME.items()}
REASONS = {
    "explicit": pb.ROUTE_REASON_EXPLICIT,
    "session": pb.ROUTE_REASON_SESSION,
    "classifier": pb.ROUTE_REASON_CLASSIFIER,
    "judge": pb.ROUTE_REASON_JUDGE,
    "fallback": pb.ROUTE_REASON_DEFAULT,
}
RETRY_AFTER_MS_KEY = "retry-after-ms"
UPSTREAM_TTFT_KEY = "x-macaron-upstream-ttft-ms"
"""Trailer: the specialist's time to first token as this router saw it (the router's own share is the rest)."""


@dataclass
class _Timing:
    """When a Generate call started, sent its first token, and what usage its last chunk reported."""

    start: float
    first_token: float | None = None
    usage: pb.Usage | None = None


class Abort(Exception):
    """A status to end the call with."""

    def __init__(self, code: grpc.StatusCode, details: str, trailers: tuple[tuple[str, str | bytes], ...] = ()) -> None:
        super().__init__(details)
        self.code, self.details, self.trailers = code, details, trailers


def rate_limited(message: str, retry_after_s: float) -> Abort:
    """RESOURCE_EXHAUSTED with google.rpc.RetryInfo and a retry-after-ms trailer."""
    delay = duration_pb2.Duration()
    delay.FromMilliseconds(max(1, int(retry_after_s * 1000)))
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
    status = status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED, message=message, details=[detail])
    converted = rpc_status.to_status(status)
    return Abort(converted.code, converted.details,
                 tuple(converted.trailing_metadata) + ((RETRY_AFTER_MS_KEY, str(int(retry_after_s * 1000))),))


def api_key(metadata: dict[str, str]) -> str | None:
    """The key from `authorization: Bearer <key>` or `x-api-key: <key>`."""
    auth = metadata.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip() or None
    return metadata.get("x-api-key") or None


def decision_to_proto(decision: Decision, replica: str | None = None, *, adapter: str = "",
                      version: str = "") -> pb.RouteDecision:
    """The decision on the wire; `adapter`/`version` tell the specialist which version to serve with."""
    return pb.RouteDecision(
        specialist=KIND_BY_NAME[decision.specialist],
        adapter=adapter,
        adapter_version=version,
        reason=REASONS[decision.reason],
        confidence=decision.confidence,
        replica=replica or "",
        detail=decision.detail,
    )


class RouterServicer(router_pb2_grpc.RouterServicer):
    """Generate and Classify over one RoutingCore and Forwarder."""

    def __init__(self, core: RoutingCore, forwarder: Forwarder, guard: Guard, *, default_timeout_s: float = 600.0,
                 max_messages: int = 1024, max_tools: int = 128) -> None:
        self.core = core
        self.forwarder = forwarder
        self.guard = guard
        self.default_timeout_s = default_timeout_s
        self.max_messages = max_messages
        self.max_tools = max_tools
        self._background: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------ shared steps

    def _authenticate(self, metadata: dict[str, str]) -> Principal:
        try:
            return self.guard.authenticate(api_key(metadata))
        except AuthError as exc:
            raise Abort(grpc.StatusCode.UNAUTHENTICATED, str(exc)) from None

    async def _check_limit(self, principal: Principal) -> None:
        try:
            await self.guard.check_limit(principal)
        except RateLimitedError as exc:
            raise rate_limited(str(exc), exc.retry_after_s) from None

    def _release(self, lease: Lease, tokens: int) -> None:
        """In the background: a cancelled call's cleanup must not wait on the store, nor be cancelled with it."""
        if lease is NO_LEASE:
            return
        task = asyncio.get_running_loop().create_task(lease.release(tokens))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _admit(self, metadata: dict[str, str]) -> Principal:
        principal = self._authenticate(metadata)
        await self._check_limit(principal)
        return principal

    async def _limits(self, principal: Principal, admission: Admission,
                      answer: "asyncio.Future[AdmitResult]") -> tuple[Lease, float]:
        """The request rate, the token budget and the concurrency slot, settled from the store's one answer (sent
        in the route's session-and-states read, `AdmitOnRead`). Returns the lease and the milliseconds until the
        verdict, which overlap the routing decision (`RoutingCore.route`'s gate)."""
        t = time.perf_counter()
        try:
            lease = await self.guard.lease(principal, admission, answer=answer)
        except RateLimitedError as exc:
            raise rate_limited(str(exc), exc.retry_after_s) from None
        finally:
            self.core.metrics.admissions.labels("process" if self.guard.degraded else "store").inc()
        return lease, (time.perf_counter() - t) * 1000

    def _drop_lease(self, admitted: "asyncio.Future[tuple[Lease, float]]") -> None:
        """A request that ended before using its lease (a bad hint, a failed route) gives it back, even when
        the limit check is still in flight."""

        def done(future: "asyncio.Future[tuple[Lease, float]]") -> None:
            if not future.cancelled() and future.exception() is None:
                self._release(future.result()[0], 0)

        if admitted.done():
            done(admitted)
        else:
            admitted.add_done_callback(done)

    def _route_request(self, request: pb.GenerateRequest, principal: Principal, request_id: str,
                       context: grpc.aio.ServicerContext) -> RouteRequest:
        try:
            chat = request_from_proto(request, max_messages=self.max_messages, max_tools=self.max_tools)
        except RequestError as exc:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
        forced = None
        if request.specialist != pb.SPECIALIST_KIND_UNSPECIFIED:
            forced = NAME_BY_KIND.get(request.specialist)
            if forced is None:
                raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"specialist {request.specialist} is not one of "
                                                              f"{', '.join(SPECIALISTS)} (or unspecified)")
        if len(request.session_id) > MAX_SESSION_ID_LENGTH:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT,
                        f"session_id has {len(request.session_id)} characters; at most {MAX_SESSION_ID_LENGTH} are allowed")
        remaining = context.time_remaining()  # the caller's gRPC deadline: it bounds the judge's engine call
        return RouteRequest(chat, owner=principal.name, session_id=request.session_id, forced=forced,
                            replica_hint=request.engine_replica_hint or None, request_id=request_id,
                            deadline=None if remaining is None else time.monotonic() + remaining)

    def _finish_version(self, route: Route, timing: "_Timing", code: grpc.StatusCode, span: trace.Span) -> None:
        """Per-version metrics, the span's token counts, and the outcome the canary watcher judges."""
        m, name, label = self.core.metrics, route.decision.specialist, route.version or "unversioned"
        end = time.perf_counter()
        m.version_in_flight.labels(name, label).dec()
        m.version_requests.labels(name, label, code.name).inc()
        ttft = None if timing.first_token is None else timing.first_token - timing.start
        if ttft is not None:
            m.version_ttft.labels(name, label).observe(ttft)
        if code == grpc.StatusCode.OK:
            m.version_e2e.labels(name, label).observe(end - timing.start)
        usage = timing.usage
        if usage is not None:
            m.version_tokens.labels(name, label, "prompt").inc(usage.prompt_tokens)
            m.version_tokens.labels(name, label, "completion").inc(usage.completion_tokens)
            m.version_tokens.labels(name, label, "cached").inc(usage.cached_tokens)
            span.set_attribute("usage.prompt_tokens", usage.prompt_tokens)
            span.set_attribute("usage.completion_tokens", usage.completion_tokens)
            span.set_attribute("usage.cached_tokens", usage.cached_tokens)
            if code == grpc.StatusCode.OK:  # the engine's own count checks (and teaches) the prefix index
                self.core.observe_cached(route, usage.cached_tokens)
            if timing.first_token is not None and usage.completion_tokens > 1:
                m.version_tpot.labels(name, label).observe((end - timing.first_token) / (usage.completion_tokens - 1))
        self.core.versions.finished(name, route.version, code=code.name, ttft_s=ttft)

    def _count(self, method: str, code: grpc.StatusCode) -> None:
        self.core.metrics.requests.labels(method, code.name).inc()

    # ------------------------------------------------------------ RPCs

    async def Generate(
        self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.GenerateChunk]:
        timing = _Timing(time.perf_counter())
        metadata = telemetry.metadata_to_dict(context.invocation_metadata())
        request_id = telemetry.bind_request_id(request.request_id or metadata.get(telemetry.REQUEST_ID_KEY))
        span = telemetry.tracer(__name__).start_span("router.Generate", context=telemetry.extract(metadata))
        route = None
        abort: Abort | None = None
        self.core.metrics.in_flight.inc()
        lease = NO_LEASE
        tokens = 0
        try:
            principal = self._authenticate(metadata)
            req = self._route_request(request, principal, request_id, context)
            # The limits ride on the route's session-and-states read (one state-store round trip for both) and are
            # settled beside the decision; the route awaits them before the judge (an engine call) and before
            # anything is placed or recorded, so an over-limit caller costs at most the classifier and leaves no trace.
            admitted: asyncio.Future[tuple[Lease, float]]
            admit_on_read: AdmitOnRead | None = None
            if self.guard.take_credit(principal):  # a rate-only key with credit left: no store call for its limit
                self.core.metrics.admissions.labels("credit").inc()
                admitted = asyncio.get_running_loop().create_future()
                admitted.set_result((NO_LEASE, 0.0))
            else:
                admission = self.guard.admission(principal)
                answer: asyncio.Future[AdmitResult] = asyncio.get_running_loop().create_future()
                admitted = asyncio.ensure_future(self._limits(principal, admission, answer))
                admit_on_read = AdmitOnRead(admission, answer)
            route_start = time.perf_counter()
            try:
                route = await self.core.route(req, gate=admitted, admit=admit_on_read)
            except InvalidHintError as exc:
                raise Abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
            finally:
                if route is None:
                    self._drop_lease(admitted)
            lease, route.times.admit_ms = admitted.result()
            route_end = time.perf_counter()
            d = route.decision
            version_label = route.version or "unversioned"
            span.set_attribute("specialist", d.specialist)
            span.set_attribute("route.reason", d.reason)
            span.set_attribute("route.confidence", d.confidence)
            span.set_attribute("adapter.version", route.version)
            span.set_attribute("adapter.version_reason", route.version_reason)
            span.set_attribute("route.replica", route.replica or "")
            vm = self.core.metrics
            vm.version_in_flight.labels(d.specialist, version_label).inc()
            forward = pb.GenerateRequest()
            forward.CopyFrom(request)
            forward.request_id = request_id
            forward.specialist = KIND_BY_NAME[d.specialist]
            forward.route.CopyFrom(decision_to_proto(d, adapter=route.adapter, version=route.version))
            forward.route.route_ms = route.route_ms  # the specialist passes it on: callers see what routing cost
            forward.route.predicted_cached_tokens = route.predicted_cached_tokens
            t = route.times
            forward.route.timing.CopyFrom(pb.RouteTiming(admit_ms=t.admit_ms, state_read_ms=t.state_read_ms,
                                                         classify_ms=t.classify_ms, judge_ms=t.judge_ms,
                                                         placement_ms=t.placement_ms))
            forward.engine_replica_hint = route.replica or ""
            forward.ClearField("routed_prompt")  # only the router's own rendering goes on, never a caller's
            if route.prompt_ids and route.render_key:
                forward.routed_prompt.token_ids.extend(route.prompt_ids)
                forward.routed_prompt.render_key = route.render_key
            remaining = context.time_remaining()
            timeout = self.default_timeout_s if remaining is None else remaining
            with trace.use_span(span, end_on_exit=False):  # the specialist's span becomes this one's child
                outgoing = telemetry.inject({})
            first, served = True, None
            forwarded = time.perf_counter()
            forward.route.timing.servicer_ms = ((route_start - timing.start) + (forwarded - route_end)) * 1000
            async for chunk in self.forwarder.stream(d.specialist, forward, timeout_s=timeout,
                                                     metadata=list(outgoing.items())):
                if timing.first_token is None and (chunk.text or chunk.tool_calls):
                    timing.first_token = time.perf_counter()
                    route.times.upstream_ttft_ms = (timing.first_token - forwarded) * 1000
                if chunk.HasField("usage"):
                    timing.usage = chunk.usage
                if first:
                    served = chunk.route.replica or None
                if chunk.HasField("finish"):  # the client may send its next turn at once: it must find this session
                    route.commit(served)
                    await route.settled()
                yield chunk
                if first:
                    first = False
                    if route.replica and served and served != route.replica:
                        self.core.snapshots.mark_down(route.replica)  # the specialist had to go elsewhere
                if chunk.HasField("usage"):
                    tokens = chunk.usage.prompt_tokens + chunk.usage.completion_tokens
                if chunk.text or chunk.tool_calls or chunk.HasField("finish"):
                    route.commit(served)  # once, after the first token: store writes stay off its path
        except Abort as exc:
            abort = exc
        except grpc.aio.AioRpcError as exc:  # the specialist's status, passed through
            abort = Abort(exc.code(), exc.details() or "", tuple(exc.trailing_metadata() or ()))
        finally:
            self._release(lease, tokens)
            self.core.metrics.in_flight.dec()
            if route is not None:
                route.release()
                self._finish_version(route, timing, abort.code if abort else grpc.StatusCode.OK, span)
            span.end()
        if abort is None:
            self._count("Generate", grpc.StatusCode.OK)
            if route is not None and timing.first_token is not None:
                context.set_trailing_metadata(((UPSTREAM_TTFT_KEY, f"{route.times.upstream_ttft_ms:.3f}"),))
            return
        self._count("Generate", abort.code)
        log.info("request %s: %s %s", request_id, abort.code.name, abort.details)
        await context.abort(abort.code, abort.details, abort.trailers)

    async def Classify(
        self, request: router_pb2.ClassifyRequest, context: grpc.aio.ServicerContext
    ) -> router_pb2.ClassifyResponse:
        metadata = telemetry.metadata_to_dict(context.invocation_metadata())
        request_id = telemetry.bind_request_id(request.request.request_id or metadata.get(telemetry.REQUEST_ID_KEY))
        t0 = time.perf_counter()
        try:
            principal = await self._admit(metadata)
            req = self._route_request(request.request, principal, request_id, context)
            decision, _ = await self.core.decide(req)
        except Abort as exc:
            self._count("Classify", exc.code)
            await context.abort(exc.code, exc.details, exc.trailers)
            raise  # unreachable: abort raises
        response = router_pb2.ClassifyResponse(route=decision_to_proto(decision),
                                               decision_ms=(time.perf_counter() - t0) * 1000)
        if decision.classified is not None:
            for name in SPECIALISTS:
                response.probabilities.add(specialist=KIND_BY_NAME[name], probability=decision.classified.p(name))
        self._count("Classify", grpc.StatusCode.OK)
        return response

    async def EndSession(
        self, request: router_pb2.EndSessionRequest, context: grpc.aio.ServicerContext
    ) -> router_pb2.EndSessionResponse:
        """Forgets the caller's session and counts it out of the live sessions in every router."""
        metadata = telemetry.metadata_to_dict(context.invocation_metadata())
        try:
            principal = self._authenticate(metadata)
            await self._check_limit(principal)
            if not request.session_id:
                raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "session_id is empty; give the id the conversation's "
                                                              "turns were sent with")
            if len(request.session_id) > MAX_SESSION_ID_LENGTH:
                raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"session_id has {len(request.session_id)} characters; "
                                                              f"at most {MAX_SESSION_ID_LENGTH} are allowed")
            try:
                ended = await self.core.end_session(principal.name, request.session_id)
            except StoreUnavailableError:
                raise Abort(grpc.StatusCode.UNAVAILABLE, "the session store does not answer; try again") from None
        except Abort as exc:
            self._count("EndSession", exc.code)
            await context.abort(exc.code, exc.details, exc.trailers)
            raise  # unreachable: abort raises
        self._count("EndSession", grpc.StatusCode.OK)
        return router_pb2.EndSessionResponse(ended=ended)
