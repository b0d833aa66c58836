"""POST /v1/completions: plain prompts → the SDK's completions (router, specialist, adapter) → OpenAI's shape.

Each prompt of a list is its own request through the router (ids `<request id>-<index>`), run
concurrently; the answer has one choice per prompt, in prompt order, and usage summed. A
stream interleaves the prompts' chunks, each tagged with its `index`, as OpenAI does. As for
chat, the first chunks are awaited before the HTTP answer starts (errors keep their status), a
client that leaves cancels every call down to the engine, and one prompt failing cancels the rest.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from opentelemetry import context as otel_context
from opentelemetry import trace
from starlette.responses import JSONResponse, Response, StreamingResponse

from macaron import telemetry
from macaron.gateway import protocol as p
from macaron.gateway import protocol_completions as pc
from macaron.gateway.deadline import Deadline, started_by
from macaron.gateway.errors import GatewayError, from_sdk
from macaron.gateway.serving_chat import ChatService, _data, error_frames, route_headers, usage_model
from macaron.sdk import APIError, AsyncStream, ChatResult, TokenLogprob, Usage

log = logging.getLogger(__name__)


def completion_params(req: pc.CompletionRequest, session_id: str | None) -> dict[str, Any]:
    """The SDK's `completions.create` keyword arguments (without prompt, stream and request id)."""
    return {
        "specialist": req.specialist,
        "session_id": session_id,
        "max_tokens": req.max_tokens if req.max_tokens is not None else pc.DEFAULT_MAX_TOKENS,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "frequency_penalty": req.frequency_penalty,
        "presence_penalty": req.presence_penalty,
        "stop": req.stop,
        "seed": req.seed,
        "top_k": -1 if req.top_k == 0 else req.top_k,  # vLLM's 0 means off; the wire's off is -1
        "min_p": req.min_p,
        "repetition_penalty": req.repetition_penalty,
        "min_tokens": req.min_tokens,
        "logprobs": req.logprobs,
    }


@dataclass
class LogprobsBuilder:
    """The legacy logprobs object of one choice, built across chunks (text offsets keep counting)."""

    top: bool
    offset: int = 0
    pending: list[TokenLogprob] = field(default_factory=list)

    def take(self) -> pc.LegacyLogprobs:
        out = pc.LegacyLogprobs(top_logprobs=[] if self.top else None)
        for t in self.pending:
            out.tokens.append(t.token)
            out.token_logprobs.append(t.logprob)
            out.text_offset.append(self.offset)
            self.offset += len(t.token)
            if out.top_logprobs is not None:
                out.top_logprobs.append({o.token: o.logprob for o in t.top_logprobs})
        self.pending.clear()
        return out


def summed(usages: Sequence[Usage | None]) -> Usage:
    known = [u for u in usages if u is not None]
    return Usage(sum(u.prompt_tokens for u in known), sum(u.completion_tokens for u in known),
                 sum(u.cached_tokens for u in known))


async def _all(calls: Sequence[Awaitable[Any]]) -> list[Any]:
    """Every call's result; the first failure cancels the others (and closes streams already open)."""
    tasks = [asyncio.ensure_future(c) for c in calls]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        for outcome in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(outcome, AsyncStream):
                await outcome.close()
        raise


class CompletionService(ChatService):
    """Answers legacy completions through the SDK; shares the chat service's metrics and helpers."""

    async def complete(
        self,
        req: pc.CompletionRequest,
        *,
        api_key: str | None,
        session_id: str | None,
        request_id: str,
        disconnected: Callable[[], Awaitable[None]] | None = None,
        deadline: Deadline | None = None,
    ) -> Response:
        deadline = deadline or Deadline(time.monotonic() + self.client.timeout)
        stream = bool(req.stream)
        labels = {"model": req.model, "stream": str(stream).lower()}
        start = time.monotonic()
        self.metrics.in_flight.inc()
        handed_over = False
        span = telemetry.tracer(__name__).start_span("gateway.completions", attributes={
            "model": req.model, "stream": stream, "request_id": request_id, "prompts": len(req.prompts)})
        span_token = otel_context.attach(trace.set_span_in_context(span))
        prompts = req.prompts
        rids = [request_id] if len(prompts) == 1 else [f"{request_id}-{i}" for i in range(len(prompts))]
        try:
            client = self.client.with_options(api_key=api_key or "")
            params = completion_params(req, session_id)
            timeout = deadline.call_timeout()
            calls = [client.completions.create(prompt=text, request_id=rid, stream=stream, timeout=timeout, **params)
                     for text, rid in zip(prompts, rids)]
            if not stream:
                results = await self._unless_disconnected(_all(calls), disconnected)
                if results is None:
                    self.metrics.disconnects.inc()
                    self._count(labels, 499)
                    return Response(status_code=499)
                self._observe_route(results[0].route, req.model, start)
                response = self._answer(req, results, request_id)
                self._count(labels, 200, summed([r.usage for r in results]), results[0].route)
                return response
            streams: list[AsyncStream] = await started_by(_all(calls), deadline)
            self._observe_route(streams[0].route, req.model, start)
            handed_over = True
            return StreamingResponse(
                self._sse_completions(req, streams, request_id, labels, start),
                media_type="text/event-stream",
                headers={"cache-control": "no-cache", "x-accel-buffering": "no", **route_headers(streams[0].route)},
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
            span.end()
            if not handed_over:
                self.metrics.in_flight.dec()
                self.metrics.latency.labels(**labels).observe(time.monotonic() - start)

    def _answer(self, req: pc.CompletionRequest, results: list[ChatResult], request_id: str) -> Response:
        choices = []
        for index, (prompt, result) in enumerate(zip(req.prompts, results)):
            if result.finish_reason == "abort":
                raise GatewayError(503, "the engine aborted the request; retry it", type="service_unavailable",
                                   code="aborted", retry_after_s=1)
            logprobs = None
            if req.logprobs is not None:
                builder = LogprobsBuilder(top=req.logprobs > 0, pending=list(result.logprobs or ()))
                logprobs = builder.take()
            choices.append(pc.CompletionChoice(index=index, text=(prompt if req.echo else "") + result.text,
                                               logprobs=logprobs, finish_reason=result.finish_reason))
        body = pc.Completion(id=pc.completion_id(request_id), created=p.now(), model=results[0].route.model,
                             choices=choices, usage=usage_model(summed([r.usage for r in results])))
        return JSONResponse(body.model_dump(), headers=route_headers(results[0].route))

    async def _sse_completions(
        self, req: pc.CompletionRequest, streams: list[AsyncStream], request_id: str, labels: dict[str, str], start: float
    ) -> AsyncIterator[str]:
        cid, created = pc.completion_id(request_id), p.now()
        model = streams[0].route.model if streams[0].route else req.model
        builders = [LogprobsBuilder(top=(req.logprobs or 0) > 0) for _ in streams]
        usages: list[Usage | None] = [None] * len(streams)
        queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
        status, finished = 200, False

        async def pump(index: int, stream: AsyncStream) -> None:
            try:
                async for chunk in stream:
                    await queue.put((index, chunk))
                await queue.put((index, None))
            except APIError as exc:
                await queue.put((index, exc))

        def frame(index: int, text: str, finish_reason: str | None = None) -> str:
            b = builders[index]
            logprobs = b.take() if req.logprobs is not None and (b.pending or finish_reason is None) else None
            choice = pc.CompletionChoice(index=index, text=text, logprobs=logprobs, finish_reason=finish_reason)
            return _data(pc.Completion(id=cid, created=created, model=model, choices=[choice]).model_dump())

        pumps = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
        try:
            if req.echo:
                for index, prompt in enumerate(req.prompts):
                    yield frame(index, prompt)
            open_streams = len(streams)
            while open_streams:
                index, item = await queue.get()
                if isinstance(item, APIError):
                    raise item
                if item is None:
                    open_streams -= 1
                    continue
                builders[index].pending.extend(item.logprobs)
                if item.text:
                    yield frame(index, item.text)
                if item.usage is not None:
                    usages[index] = item.usage
                if item.finish_reason is not None:
                    if item.finish_reason == "abort":
                        raise GatewayError(503, "the engine aborted the request", type="service_unavailable",
                                           code="aborted")
                    yield frame(index, "", item.finish_reason)
            if req.include_usage:
                final = pc.Completion(id=cid, created=created, model=model, choices=[], usage=usage_model(summed(usages)))
                yield _data(final.model_dump())
            yield "data: [DONE]\n\n"
            finished = True
        except (APIError, GatewayError) as exc:
            status, frames = error_frames(exc, "completion stream")
            yield frames
            finished = True
        except (asyncio.CancelledError, GeneratorExit):
            status = 499
            self.metrics.disconnects.inc()
            log.info("client left the completion stream: cancelling request %s downstream", request_id)
            raise
        finally:
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            for s in streams:
                await s.close()
            self._count(labels, status if finished or status != 200 else 499, summed(usages), streams[0].route)
            self.metrics.in_flight.dec()
            self.metrics.latency.labels(**labels).observe(time.monotonic() - start)
