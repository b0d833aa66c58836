"""The `macaron.v1.Specialist` servicer: protobuf in, domain pipeline, protobuf out; errors → status.

Thin on purpose: validation is `macaron.prompting.convert`, the work is `generation.Pipeline`,
translation is `wire`. The only logic here is the status mapping (`status_for`), in one place.
"""

from __future__ import annotations

import logging
import time
from typing import AsyncIterator, NamedTuple

import grpc
from google.protobuf import any_pb2, duration_pb2
from opentelemetry import context as otel_context
from opentelemetry import trace
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from macaron import telemetry
from macaron.prompting.convert import request_from_proto
from macaron.prompting.messages import RequestError
from macaron.specialist import errors
from macaron.specialist.events import Done, RouteInfo, TextDelta, ToolCallDeltas
from macaron.specialist.generation import Pipeline
from macaron.specialist.metrics import SpecialistMetrics
from macaron.specialist.profiles import default_schema_json
from macaron.specialist.wire import KIND_BY_NAME, NAME_BY_KIND, event_to_chunk, sampling_from_proto
from macaron.v1 import common_pb2, specialist_pb2, specialist_pb2_grpc

log = logging.getLogger(__name__)
RETRY_AFTER_MS_KEY = "retry-after-ms"

_CODES: list[tuple[type[Exception], grpc.StatusCode]] = [
    (errors.BadRequestError, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.OverloadedError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (errors.UnavailableError, grpc.StatusCode.UNAVAILABLE),
    (errors.DeadlineExceededError, grpc.StatusCode.DEADLINE_EXCEEDED),
    (errors.OutputTruncatedError, grpc.StatusCode.OUT_OF_RANGE),
    (errors.OutputInvalidError, grpc.StatusCode.INTERNAL),
]


class StatusInfo(NamedTuple):
    """What `context.abort` takes."""

    code: grpc.StatusCode
    details: str
    trailing_metadata: tuple[tuple[str, str | bytes], ...]


def status_for(exc: errors.SpecialistError) -> StatusInfo:
    """The gRPC status of a domain error; overload carries google.rpc.RetryInfo and a retry-after-ms trailer."""
    code = next((c for cls, c in _CODES if isinstance(exc, cls)), grpc.StatusCode.INTERNAL)
    status = status_pb2.Status(code=getattr(code_pb2, code.name), message=str(exc))
    extra: tuple[tuple[str, str], ...] = ()
    if isinstance(exc, errors.OverloadedError):
        delay = duration_pb2.Duration()
        delay.FromMilliseconds(int(exc.retry_after_s * 1000))
        detail = any_pb2.Any()
        detail.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
        status.details.append(detail)
        extra = ((RETRY_AFTER_MS_KEY, str(int(exc.retry_after_s * 1000))),)
    converted = rpc_status.to_status(status)
    return StatusInfo(converted.code, converted.details, tuple(converted.trailing_metadata) + extra)


class SpecialistServicer(specialist_pb2_grpc.SpecialistServicer):
    """Serves one profile's pipeline."""

    def __init__(self, pipeline: Pipeline, metrics: SpecialistMetrics | None = None) -> None:
        self.pipeline = pipeline
        self.name = pipeline.profile.name
        self.metrics = metrics or SpecialistMetrics(self.name)

    async def Generate(
        self, request: common_pb2.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[common_pb2.GenerateChunk]:
        metadata = telemetry.metadata_to_dict(context.invocation_metadata())
        request_id = telemetry.bind_request_id(request.request_id or metadata.get(telemetry.REQUEST_ID_KEY))
        span = telemetry.tracer(__name__).start_span(
            "specialist.Generate", context=telemetry.extract(metadata), attributes={"specialist": self.name}
        )
        # The span is current while the request runs, so the engine client carries it to the engine.
        # grpc.aio runs each call in its own task (its own context copy), so it is never detached:
        # a stream closed by a finalizer task would detach from a foreign context and log an error.
        otel_context.attach(trace.set_span_in_context(span))
        m, started, first_chunk_seen, code = self.metrics, time.perf_counter(), False, grpc.StatusCode.OK
        m.in_flight.labels(self.name).inc()
        try:
            if request.specialist not in (common_pb2.SPECIALIST_KIND_UNSPECIFIED, KIND_BY_NAME[self.name]):
                forced = NAME_BY_KIND.get(request.specialist, f"unknown ({request.specialist})")
                raise errors.BadRequestError(f"this is the {self.name} specialist; the request is forced to {forced}")
            try:
                chat = request_from_proto(
                    request, max_messages=self.pipeline.settings.max_messages, max_tools=self.pipeline.settings.max_tools
                )
            except RequestError as exc:
                raise errors.BadRequestError(str(exc)) from None
            routed = request.routed_prompt
            prompt_ids = self.pipeline.routed_ids(routed.token_ids, routed.render_key)
            if routed.token_ids:
                m.routed_prompts.labels(self.name, "used" if prompt_ids is not None else "rendered_again").inc()
            events = self.pipeline.run(
                chat,
                sampling_from_proto(request.sampling),
                request_id=request_id,
                replica_hint=request.engine_replica_hint or None,
                timeout_s=context.time_remaining(),
                # the router's version choice (route.adapter set): obeyed, "" being the unversioned adapter
                adapter_version=request.route.adapter_version if request.route.adapter else None,
                logprobs=request.top_logprobs if request.logprobs else None,
                prompt_ids=prompt_ids,
            )
            if request.route.adapter:
                span.set_attribute("adapter.version", request.route.adapter_version)
            # The route rides on the stream's next chunk (the first token's, in the same engine step): one message
            # less before the first token, on every hop it crosses (a router relays each message on its own).
            held_route: common_pb2.GenerateChunk | None = None
            async for event in events:
                if not first_chunk_seen and isinstance(event, (TextDelta, ToolCallDeltas)):
                    first_chunk_seen = True
                    m.ttft.labels(self.name).observe(time.perf_counter() - started)
                elif isinstance(event, Done):
                    m.prompt_tokens.labels(self.name).inc(event.usage.prompt_tokens)
                    m.cached_tokens.labels(self.name).inc(event.usage.cached_tokens)
                    m.completion_tokens.labels(self.name).inc(event.usage.completion_tokens)
                chunk = event_to_chunk(event, request_id, self.name, request.route)
                if isinstance(event, RouteInfo):
                    held_route = chunk
                    continue
                if held_route is not None:
                    chunk.route.CopyFrom(held_route.route)
                    held_route = None
                yield chunk
            if held_route is not None:  # nothing followed it (never the case with a Done): it still goes out
                yield held_route
        except errors.SpecialistError as exc:
            status = status_for(exc)
            code = status.code
            span.set_attribute("grpc.status", status.code.name)
            log.info("request %s failed: %s %s", request_id, status.code.name, exc)
            await context.abort(status.code, status.details, status.trailing_metadata)
        except BaseException:
            code = grpc.StatusCode.CANCELLED if context.cancelled() else grpc.StatusCode.INTERNAL
            raise
        finally:
            m.in_flight.labels(self.name).dec()
            m.requests.labels(self.name, code.name).inc()
            span.end()

    async def Info(
        self, request: specialist_pb2.InfoRequest, context: grpc.aio.ServicerContext
    ) -> specialist_pb2.InfoResponse:
        p = self.pipeline
        s = p.profile.settings
        try:
            replicas = list(await p.picker.replicas())
        except errors.UnavailableError:
            replicas = []
        try:
            context_length = await p.context_length()
        except errors.UnavailableError:
            context_length = 0
        return specialist_pb2.InfoResponse(
            specialist=KIND_BY_NAME[self.name],
            name=self.name,
            adapter=s.adapter,
            adapter_version=s.adapter_version or "",
            context_length=context_length,
            sampling_defaults=common_pb2.SamplingParams(
                max_new_tokens=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p, top_k=s.top_k
            ),
            sampling_caps=common_pb2.SamplingParams(max_new_tokens=s.max_new_tokens_cap, temperature=s.max_temperature),
            engine_replicas=replicas,
            output_schema_json=default_schema_json(p.profile),
            tool_call_parser=p.profile.parser.name if p.profile.parser else "",
        )
