"""POST /v1/chat/completions: OpenAI request → SDK call to the router → OpenAI JSON or SSE.

The router's first chunk (the route decision) is awaited before the HTTP answer starts, so
errors before any output keep their HTTP status, and the route shows in the headers of
streams too (`x-macaron-specialist`, `x-macaron-route-reason`, ...). A client that leaves a
stream cancels the gRPC call, which cancels the specialist's and the engine's work.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import grpc
from opentelemetry import context as otel_context
from opentelemetry import trace
from starlette.responses import JSONResponse, Response, StreamingResponse

from macaron import telemetry
from macaron.gateway import protocol as p
from macaron.gateway.deadline import Deadline, started_by
from macaron.gateway.errors import GatewayError, from_sdk
from macaron.gateway.metrics import GatewayMetrics
from macaron.sdk import APIError, AsyncMacaronClient, AsyncStream, ChatResult, Route, TokenLogprob, Usage

log = logging.getLogger(__name__)
SESSION_HEADER = "x-session-id"


def route_headers(route: Route | None) -> dict[str, str]:
    """The route decision as response headers (ignored by OpenAI clients, read by curious ones)."""
    if route is None:
        return {}
    headers = {
        "x-macaron-specialist": route.specialist or "",
        "x-macaron-route-reason": route.reason,
        "x-macaron-route-confidence": f"{route.confidence:.3f}",
        "x-macaron-route-ms": f"{route.route_ms:.2f}",
    }
    if route.adapter:
        headers["x-macaron-adapter"] = route.adapter + (f"@{route.adapter_version}" if route.adapter_version else "")
        headers["x-macaron-adapter-version"] = route.adapter_version  # "" for the unversioned adapter
    return headers


def stream_summary(route: Route | None, start: float, first_token: float | None, last_token: float | None,
                   usage: Usage | None) -> dict[str, Any]:
    """The `macaron` field of a stream's last chunk: its route and the gateway's timing (an extra field,
    which OpenAI clients ignore). TTFT runs from the request to the first text or tool-call chunk;
    tokens/s is the decode rate after it (None when fewer than two chunks came)."""
    ttft_ms = None if first_token is None else round((first_token - start) * 1000, 1)
    rate = None
    if usage is not None and first_token is not None and last_token is not None and last_token > first_token:
        rate = round(max(usage.completion_tokens - 1, 0) / (last_token - first_token), 1)
    summary: dict[str, Any] = {"ttft_ms": ttft_ms, "tokens_per_s": rate}
    if route is not None:
        summary.update(specialist=route.specialist, route_reason=route.reason,
                       route_confidence=round(route.confidence, 3), adapter_version=route.adapter_version,
                       route_ms=round(route.route_ms, 2))
    return summary


def usage_model(usage: Usage) -> p.CompletionUsage:
    return p.CompletionUsage(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens,
        prompt_tokens_details=p.PromptTokensDetails(cached_tokens=usage.cached_tokens),
    )


def logprob_models(tokens: Sequence[TokenLogprob]) -> list[p.TokenLogprob]:
    """The SDK's token logprobs in OpenAI's chat shape (bytes as lists of ints)."""
    return [
        p.TokenLogprob(token=t.token, logprob=t.logprob, bytes=list(t.bytes),
                       top_logprobs=[p.TopLogprob(token=o.token, logprob=o.logprob, bytes=list(o.bytes))
                                     for o in t.top_logprobs])
        for t in tokens
    ]


def sdk_params(req: p.ChatCompletionRequest, session_id: str | None) -> dict[str, Any]:
    """The SDK's `chat.create` keyword arguments for an OpenAI request."""
    params: dict[str, Any] = {
        "messages": [m.model_dump(exclude_none=True, by_alias=True) for m in req.messages],
        "specialist": req.specialist,
        "session_id": session_id,
        "max_tokens": req.output_budget,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "frequency_penalty": req.frequency_penalty,
        "presence_penalty": req.presence_penalty,
        "stop": req.stop,
        "seed": req.seed,
        "request_metadata": req.metadata,
        "top_k": -1 if req.top_k == 0 else req.top_k,  # vLLM's 0 means off; the wire's off is -1
        "min_p": req.min_p,
        "repetition_penalty": req.repetition_penalty,
        "min_tokens": req.min_tokens,
        "logprobs": req.logprobs,
        "top_logprobs": req.top_logprobs,
        "parallel_tool_calls": req.parallel_tool_calls,
    }
    if req.tools:
        params["tools"] = [t.model_dump(exclude_none=True) for t in req.tools]
    if req.tool_choice is not None:
        params["tool_choice"] = req.tool_choice if isinstance(req.tool_choice, str) else req.tool_choice.model_dump()
    if req.response_format is not None:
        params["response_format"] = req.response_format.model_dump(exclude_none=True, by_alias=True)
    return params


class ChatService:
    """Answers chat completions through the SDK; one per app."""

    def __init__(self, client: AsyncMacaronClient, metrics: GatewayMetrics) -> None:
        self.client = client
        self.metrics = metrics

    async def create(
        self,
        req: p.ChatCompletionRequest,
        *,
        api_key: str | None,
        session_id: str | None,
        request_id: str,
        disconnected: Callable[[], Awaitable[None]] | None = None,
        deadline: Deadline | None = None,
    ) -> Response:
        """The answer; `disconnected` returns when the client leaves, which cancels a non-streamed call
        down to the engine (Starlette cancels nothing until the handler returns). `deadline` (the
        client's) becomes the router call's gRPC deadline; past it the answer is a 504."""
        deadline = deadline or Deadline(time.monotonic() + self.client.timeout)
        stream = bool(req.stream)
        labels = {"model": req.model, "stream": str(stream).lower()}
        start = time.monotonic()
        self.metrics.in_flight.inc()
        handed_over = False
        # the request's root span (or a child of the caller's): the SDK carries it to the router
        span = telemetry.tracer(__name__).start_span("gateway.chat_completions", attributes={
            "model": req.model, "stream": stream, "request_id": request_id})
        span_token = otel_context.attach(trace.set_span_in_context(span))
        try:
            client = self.client.with_options(api_key=api_key or "")
            params = sdk_params(req, session_id)
            if not stream:
                call = client.chat.create(**params, request_id=request_id, timeout=deadline.call_timeout())
                result = await self._unless_disconnected(call, disconnected)
                if result is None:
                    self.metrics.disconnects.inc()
                    self._count(labels, 499)
                    log.info("client left before the answer: cancelled request %s downstream", request_id)
                    return Response(status_code=499)
                self._observe_route(result.route, req.model, start)
                response = self._completion(result)
                self._count(labels, 200, result.usage, result.route)
                return response
            sdk_stream = await started_by(
                client.chat.create(**params, request_id=request_id, stream=True, timeout=deadline.call_timeout()), deadline)
            self._observe_route(sdk_stream.route, req.model, start)
            handed_over = True
            return StreamingResponse(
                self._sse(req, sdk_stream, labels, start),
                media_type="text/event-stream",
                headers={"cache-control": "no-cache", "x-accel-buffering": "no", **route_headers(sdk_stream.route)},
            )
        except APIError as exc:
            error = deadline.expired_error() if exc.code == grpc.StatusCode.DEADLINE_EXCEEDED else from_sdk(exc)
            log.info("router answered %s: %s", exc.code.name, exc.message)
            self._count(labels, error.status)
            raise error from None
        except GatewayError as exc:
            self._count(labels, exc.status)
            raise
        finally:
            otel_context.detach(span_token)
            span.end()  # a stream's span ends once its answer started (the router's spans cover the rest)
            if not handed_over:
                self.metrics.in_flight.dec()
                self.metrics.latency.labels(**labels).observe(time.monotonic() - start)

    # ------------------------------------------------------------ helpers

    @staticmethod
    async def _unless_disconnected(call: Awaitable[ChatResult], disconnected: Callable[[], Awaitable[None]] | None
                                   ) -> ChatResult | None:
        """The call's result, or None (and the call cancelled) when the client left first."""
        if disconnected is None:
            return await call
        task = asyncio.ensure_future(call)
        watcher = asyncio.ensure_future(disconnected())
        try:
            await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
            if not task.done():
                task.cancel()
        if task.cancelled() or (not task.done()):
            await asyncio.gather(task, return_exceptions=True)
            return None
        return task.result()

    def _observe_route(self, route: Route | None, model: str, start: float) -> None:
        self.metrics.first_chunk.labels(model=model).observe(time.monotonic() - start)
        self.metrics.observe_route(route, time.monotonic() - start)
        if route is not None:
            span = trace.get_current_span()
            span.set_attribute("specialist", route.specialist or "")
            span.set_attribute("route.reason", route.reason)
            span.set_attribute("adapter.version", route.adapter_version)
        if route is not None:
            self.metrics.routes.labels(specialist=route.specialist or "none", reason=route.reason).inc()

    def _count(self, labels: dict[str, str], status: int, usage: Usage | None = None, route: Route | None = None) -> None:
        self.metrics.requests.labels(status=str(status), **labels).inc()
        self.metrics.count_version(route, status, usage)
        if usage is not None:
            trace.get_current_span().set_attribute("usage.completion_tokens", usage.completion_tokens)
        log.info(
            "chat completion model=%s stream=%s status=%d specialist=%s reason=%s tokens=%s/%s",
            labels["model"], labels["stream"], status, route.specialist if route else "-", route.reason if route else "-",
            usage.prompt_tokens if usage else "-", usage.completion_tokens if usage else "-",
        )
        if usage is not None:
            specialist = (route.specialist if route else None) or "none"
            for kind, value in (("prompt", usage.prompt_tokens), ("completion", usage.completion_tokens),
                                ("cached", usage.cached_tokens)):
                self.metrics.tokens.labels(kind=kind, specialist=specialist).inc(value)

    def _completion(self, result: ChatResult) -> Response:
        if result.finish_reason == "abort":
            raise GatewayError(503, "the engine aborted the request; retry it", type="service_unavailable",
                               code="aborted", retry_after_s=1)
        calls = [
            p.ResponseToolCall(id=c.id, function=p.ResponseFunctionCall(name=c.function.name, arguments=c.function.arguments))
            for c in result.tool_calls
        ]
        body = p.ChatCompletion(
            id=_completion_id(result.request_id),
            created=p.now(),
            model=result.route.model,
            choices=[
                p.Choice(
                    message=p.ResponseMessage(content=result.text if (result.text or not calls) else None,
                                              tool_calls=calls or None),
                    finish_reason=result.finish_reason,
                    logprobs=None if result.logprobs is None else p.ChoiceLogprobs(content=logprob_models(result.logprobs)),
                )
            ],
            usage=usage_model(result.usage),
        )
        return JSONResponse(body.model_dump(), headers=route_headers(result.route))

    async def _sse(
        self, req: p.ChatCompletionRequest, stream: AsyncStream, labels: dict[str, str], start: float
    ) -> AsyncIterator[str]:
        cid = _completion_id(stream.request_id)
        created = p.now()
        model = stream.route.model if stream.route else req.model
        status = 200
        usage: Usage | None = None
        finished = False

        pending: list[TokenLogprob] = []
        """Logprobs not sent yet: they ride with the next frame (OpenAI puts them next to the delta they explain)."""

        def frame(delta: p.Delta, finish_reason: str | None = None, extra: dict[str, Any] | None = None) -> str:
            logprobs = None
            if req.logprobs and (pending or finish_reason is None):
                logprobs = p.ChoiceLogprobs(content=logprob_models(pending))
                pending.clear()
            chunk = p.ChatCompletionChunk(id=cid, created=created, model=model, choices=[
                p.ChunkChoice(delta=delta, finish_reason=finish_reason, logprobs=logprobs)])
            body = chunk.model_dump()
            body["choices"][0]["delta"] = delta.model_dump(exclude_none=True)  # OpenAI omits unset delta fields
            if extra:
                body.update(extra)
            return _data(body)

        first_token: float | None = None
        last_token: float | None = None
        try:
            yield frame(p.Delta(role="assistant", content=""))
            finish_reason: str | None = None
            async for chunk in stream:
                pending.extend(chunk.logprobs)
                if chunk.text or chunk.tool_calls:
                    last_token = time.monotonic()
                    first_token = first_token or last_token
                if chunk.text:
                    yield frame(p.Delta(content=chunk.text))
                if chunk.tool_calls:
                    deltas = [
                        p.DeltaToolCall(
                            index=d.index, id=d.id or None, type="function" if d.id else None,
                            function=p.DeltaFunctionCall(name=d.name or None, arguments=d.arguments),
                        )
                        for d in chunk.tool_calls
                    ]
                    if deltas:
                        yield frame(p.Delta(tool_calls=deltas))
                if chunk.finish_reason is not None:
                    finish_reason = chunk.finish_reason
                if chunk.usage is not None:
                    usage = chunk.usage
            if finish_reason == "abort":
                raise GatewayError(503, "the engine aborted the request", type="service_unavailable", code="aborted")
            if pending:  # logprobs of tokens that showed no text (held back, or markup)
                yield frame(p.Delta())
            yield frame(p.Delta(), finish_reason or "stop",
                        {"macaron": stream_summary(stream.route, start, first_token, last_token, usage)})
            if req.include_usage and usage is not None:
                final = p.ChatCompletionChunk(id=cid, created=created, model=model, choices=[], usage=usage_model(usage))
                yield _data(final.model_dump())
            yield "data: [DONE]\n\n"
            finished = True
        except (APIError, GatewayError) as exc:
            status, frames = error_frames(exc, "stream")
            yield frames
            finished = True
        except (asyncio.CancelledError, GeneratorExit):
            status = 499
            self.metrics.disconnects.inc()
            log.info("client left the stream: cancelling request %s downstream", stream.request_id)
            raise
        finally:
            await stream.close()
            self._count(labels, status if finished or status != 200 else 499, usage, stream.route)
            self.metrics.in_flight.dec()
            self.metrics.latency.labels(**labels).observe(time.monotonic() - start)


def _data(obj: Any) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'), ensure_ascii=False)}\n\n"


def error_frames(exc: APIError | GatewayError, what: str) -> tuple[int, str]:
    """A failure after an SSE stream started: the status can no longer change, so the error goes
    out as the last data frame (OpenAI's shape), then [DONE]. Returns the status for metrics."""
    if isinstance(exc, APIError):
        error = from_sdk(exc)
        log.info("%s failed after it started: %s %s", what, error.status, exc.message)
    else:
        error = exc
    return error.status, _data(error.body()) + "data: [DONE]\n\n"


def _completion_id(request_id: str) -> str:
    return f"chatcmpl-{request_id}" if request_id else p.completion_id()
