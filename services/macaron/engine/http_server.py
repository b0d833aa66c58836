"""SGLang's native HTTP API (release 0.5.23, the subset the project uses) over an AsyncEngine.

The embedded engine answers the same requests as an SGLang server, so one client, one router
(smg) and one contract test suite work against both. `create_app(engine, args)` builds the
app; the lifespan starts and stops the engine; nothing lives at module level.

Errors use SGLang's own bodies, which differ by where SGLang detects them:

| failure                                               | status | body                                              |
|-------------------------------------------------------|--------|---------------------------------------------------|
| body is not a JSON object                             | 400    | {"object": "error", "message", "type": "Bad Request", "param": null, "code": 400} |
| a field has the wrong type; unknown sampling field    | 400    | {"error": "<message>"} (SGLang's schema contract) |
| refused by the engine (adapter, prompt, ranges, ...)  | 400    | {"error": {"message", "type", "code"}}            |
| waiting queue full; starting or shutting down         | 503    | {"object": "error", "message", "type": "503", "param": null, "code": 503} |
| failure after the stream started                      | 200    | data: {"error": {"message", "type", "code", "retryable"}} |
| the caller's deadline (x-macaron-timeout) passed      | 504    | {"object": "error", ...}; streaming: the last chunk's meta_info.finish_reason is {"type": "abort", "status_code": 504, ...} |

A /generate request may carry the caller's remaining time (`x-macaron-timeout`, seconds, sent by the
project's engine client; SGLang ignores it): the engine aborts the request when it passes, whether
it waits in the queue or runs, and whether or not anyone still reads the answer, so a client that
vanished without closing its connection leaves no work running.

Unlike SGLang, a streaming request that the engine refuses is answered with its status code
before the stream starts (the engine validates synchronously), never with an error frame.

Top-level /generate fields SGLang accepts but this engine does not apply are listed in
http_protocol.IGNORED_FIELDS; fields it cannot honour (prompt logprobs, images, sessions, ...) are refused with
a 400 naming the field. Unknown top-level fields are ignored, as SGLang does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
import uuid
from contextlib import asynccontextmanager
from importlib import metadata
from typing import Any, AsyncIterator

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST

from macaron.engine.api_key import ApiKeyMiddleware, check_engine_bind
from macaron.engine.args import EngineArgs
from macaron.engine.metrics import ServerMetrics
from macaron.engine.protocol import (
    AsyncEngine,
    EngineError,
    EngineOverloadedError,
    GenerateRequest,
    RequestOutput,
    RequestStream,
)
from macaron.engine.http_protocol import (
    DEADLINE_HEADER,
    AbortReq,
    GenerateReqInput,
    HEALTH_CHECK_TIMEOUT_S,
    LoadLoRAAdapterReqInput,
    Refused,
    SGLANG_RELEASE,
    UnloadLoRAAdapterReqInput,
    ResponseEncoder,
    refusal_for,
    read_body,
    sse_event,
    wait_for_disconnect,
    engine_error,
    error_response,
    to_engine_request,
    deadline_reason,
    request_timeout,
)
from macaron.engine.sampling_params import SamplingParams

logger = logging.getLogger(__name__)

# ---------------------------------------------------------------- the server


class EngineServer:
    """Request handlers over one engine; create_app wires them to routes."""

    def __init__(self, engine: AsyncEngine, args: EngineArgs):
        self.engine = engine
        self.args = args
        self.status = "starting"
        self.started_at = time.time()
        self.active: dict[str, RequestStream] = {}
        self._background: set[asyncio.Future[None]] = set()
        self.metrics = ServerMetrics(self.served_model_name(), engine.stats, engine.memory_usage)

    def drain(self) -> None:
        """Called on a stop signal: /health answers 503 and new requests are refused while running ones finish."""
        self.status = "exiting"

    # -- identity

    def served_model_name(self) -> str:
        if self.args.served_model_name:
            return self.args.served_model_name
        info = self._engine_model_info()
        path = info.get("model_path") or self.args.model_path or ""
        return info.get("served_model_name") or os.path.basename(str(path).rstrip("/")) or "macaron-tiny"

    def _engine_model_info(self) -> dict[str, Any]:
        try:
            return dict(self.engine.model_info())
        except Exception:  # noqa: BLE001 - identity must not fail before the engine is up
            return {}

    def context_length(self) -> int | None:
        info = self._engine_model_info()
        return info.get("context_length") or info.get("context_len") or self.args.context_length

    # -- generation

    async def _submit(self, req: GenerateRequest) -> RequestStream:
        if self.status != "up":
            raise Refused(error_response(503, f"The server is {self.status}; retry later."))
        try:
            # tokenising and grammar compilation run off the event loop when the engine can
            submit_async = getattr(self.engine, "submit_async", None)
            stream = await submit_async(req) if submit_async else self.engine.submit(req)
        except EngineError as exc:
            raise refusal_for(exc) from None
        self.active[req.rid] = stream
        return stream

    async def _outputs(
        self, stream: RequestStream, request: Request, *, stream_mode: bool, log_metrics: bool,
        deadline: float | None = None,
    ) -> AsyncIterator[RequestOutput]:
        """Yields a request's outputs; aborts it when the client leaves, the consumer stops or `deadline` (loop time)
        passes (a timer, not the consumer: a stream nobody reads is stopped too)."""
        watcher = asyncio.create_task(wait_for_disconnect(request))
        watcher.add_done_callback(lambda task: self._abort_if_disconnected(task, stream))
        expired: list[bool] = []
        timer = None if deadline is None else asyncio.get_running_loop().call_at(
            deadline, self._abort_at_deadline, stream, expired)
        last: RequestOutput | None = None
        first_token_at: float | None = None
        try:
            async for out in stream:
                if expired and out.finished and (out.finish_reason or {}).get("type") == "abort":
                    out = dataclasses.replace(out, finish_reason=deadline_reason())
                last = out
                if first_token_at is None and out.completion_tokens > 0:
                    # the engine stamps the first token itself (a non-streaming request's only output is its last)
                    first_token_at = out.first_token_latency if out.first_token_latency is not None else out.e2e_latency
                yield out
                if out.finished:
                    break
        finally:
            watcher.cancel()
            if timer is not None:
                timer.cancel()
            self.active.pop(stream.rid, None)
            finished = last is not None and last.finished
            if not finished:
                with anyio.CancelScope(shield=True):
                    await stream.abort()
            if log_metrics:
                self._record(last, stream_mode, first_token_at)

    def _abort_if_disconnected(self, watcher: asyncio.Task[None], stream: RequestStream) -> None:
        if not watcher.cancelled() and watcher.exception() is None:
            logger.info("client of request %s disconnected; aborting it", stream.rid)
            task = asyncio.ensure_future(stream.abort())
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    def _abort_at_deadline(self, stream: RequestStream, expired: list[bool]) -> None:
        logger.info("request %s passed its deadline (%s); aborting it", stream.rid, DEADLINE_HEADER)
        expired.append(True)
        task = asyncio.ensure_future(stream.abort())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _record(self, last: RequestOutput | None, stream_mode: bool, first_token_at: float | None) -> None:
        reason = (last.finish_reason or {}) if last is not None else {"type": "abort"}
        self.metrics.observe_finished(
            stream=stream_mode,
            prompt_tokens=last.prompt_tokens if last else 0,
            completion_tokens=last.completion_tokens if last else 0,
            cached_tokens=last.cached_tokens if last else 0,
            e2e_latency=last.e2e_latency if last else 0.0,
            first_token_latency=first_token_at,
            aborted=reason.get("type") == "abort" or last is None or not last.finished,
        )

    def _prompt_token_ids(self, obj: GenerateReqInput) -> list[int] | None:
        if not obj.return_prompt_token_ids:
            return None
        if obj.input_ids is not None:
            return list(obj.input_ids)  # type: ignore[arg-type]
        return list(self.engine.tokenizer.encode(obj.text, add_special_tokens=False))

    async def generate(self, request: Request) -> Response:
        timeout_s = request_timeout(request.headers)
        deadline = None if timeout_s is None else asyncio.get_running_loop().time() + timeout_s  # from arrival
        obj: GenerateReqInput = await read_body(request, GenerateReqInput)
        req = to_engine_request(obj)
        tokenizer = self.engine.tokenizer
        token_text = (lambda t: tokenizer.decode([t])) if obj.return_text_in_logprobs else None
        encoder = ResponseEncoder(obj.stream and self.args.incremental_streaming_output, self._prompt_token_ids(obj),
                                  token_text)
        stream = await self._submit(req)
        outputs = self._outputs(stream, request, stream_mode=obj.stream, log_metrics=obj.log_metrics, deadline=deadline)
        if obj.stream:
            return StreamingResponse(self._sse_body(outputs, encoder), media_type="text/event-stream")
        return await self._single_response(outputs, encoder)

    async def _single_response(self, outputs: AsyncIterator[RequestOutput], encoder: ResponseEncoder) -> Response:
        last: RequestOutput | None = None
        try:
            async for out in outputs:
                last = out
        except EngineError as exc:
            return refusal_for(exc).response
        if last is None:
            return engine_error(500, "the engine ended the request without output")
        reason = last.finish_reason or {}
        status = reason.get("status_code") if reason.get("type") == "abort" else None
        if isinstance(status, int) and 400 <= status < 600:
            message = str(reason.get("message") or "aborted")
            return engine_error(400, message) if status == 400 else error_response(status, message)
        return JSONResponse(encoder.encode(last))

    async def _sse_body(self, outputs: AsyncIterator[RequestOutput], encoder: ResponseEncoder) -> AsyncIterator[bytes]:
        try:
            async for out in outputs:
                yield sse_event(encoder.encode(out))
        except Exception as exc:  # noqa: BLE001 - reported in the stream, as SGLang does
            status = exc.status_code if isinstance(exc, EngineError) else 500
            kind = "invalid_request_error" if status == 400 else "server_error"
            logger.warning("stream failed: %s", exc)
            yield sse_event({"error": {"message": str(exc), "type": kind, "code": status, "retryable": status >= 500}})
        yield b"data: [DONE]\n\n"

    async def abort_request(self, request: Request) -> Response:
        obj: AbortReq = await read_body(request, AbortReq)
        rids = list(self.active) if obj.abort_all else [obj.rid] if obj.rid else []
        for rid in rids:
            await self.engine.abort(rid)
        return Response(status_code=200)

    # -- adapters

    def _lora_result(self, error: str | None) -> JSONResponse:
        body = {"success": error is None, "error_message": error or "", "loaded_adapters": self.engine.loaded_adapters()}
        return JSONResponse(body, status_code=200 if error is None else 400)

    async def load_lora_adapter(self, request: Request) -> Response:
        obj: LoadLoRAAdapterReqInput = await read_body(request, LoadLoRAAdapterReqInput)
        try:
            await self.engine.load_lora_adapter(obj.lora_name, obj.lora_path, pinned=obj.pinned)
        except EngineError as exc:
            return self._lora_result(str(exc))
        return self._lora_result(None)

    async def unload_lora_adapter(self, request: Request) -> Response:
        obj: UnloadLoRAAdapterReqInput = await read_body(request, UnloadLoRAAdapterReqInput)
        try:
            await self.engine.unload_lora_adapter(obj.lora_name)
        except EngineError as exc:
            return self._lora_result(str(exc))
        return self._lora_result(None)

    # -- health and information

    async def health_generate(self) -> Response:
        """200 once the engine produces one token; 503 while starting, exiting or stuck."""
        if self.status != "up":
            return Response(status_code=503)
        probe = GenerateRequest(
            rid=f"HEALTH_CHECK_{uuid.uuid4().hex}",
            prompt=[0],
            sampling=SamplingParams(max_new_tokens=1, temperature=0.0),
        )
        try:
            stream = self.engine.submit(probe)
        except EngineOverloadedError:
            return Response(status_code=200)  # a full queue is a busy engine, not a dead one
        except EngineError:
            return Response(status_code=503)
        finished = False
        try:
            with anyio.fail_after(HEALTH_CHECK_TIMEOUT_S):
                async for out in stream:
                    finished = out.finished
                    break
            return Response(status_code=200)
        except TimeoutError:
            logger.error("health check: no token within %.0f s", HEALTH_CHECK_TIMEOUT_S)
            return Response(status_code=503)
        except EngineError:
            return Response(status_code=503)
        finally:
            if not finished:
                with anyio.CancelScope(shield=True):
                    await stream.abort()

    def model_info(self) -> dict[str, Any]:
        info = self._engine_model_info()
        architectures = info.get("architectures") or ([info["architecture"]] if info.get("architecture") else None)
        return {
            "model_path": info.get("model_path") or self.args.model_path,
            "tokenizer_path": info.get("model_path") or self.args.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": info.get("model_type"),
            **info,
            "architectures": architectures,
            "served_model_name": self.served_model_name(),
        }

    def server_info(self) -> dict[str, Any]:
        memory = self.engine.memory_usage()
        stats = self.engine.stats()
        return {
            **self.args.model_dump(mode="json"),
            # SGLang merges its scheduler's info in at the top level, with the KV-cache tokens its pool really holds:
            # what routers size a replica's cache by
            "max_total_num_tokens": stats.kv_blocks_total * self.args.kv_block_size,
            "served_model_name": self.served_model_name(),
            "context_length": self.context_length(),
            "enable_lora": True,
            "loaded_adapters": self.engine.loaded_adapters(),
            "memory_usage": {**dataclasses.asdict(memory), "total_bytes": memory.total_bytes},
            "internal_states": [dataclasses.asdict(stats)],
            "status": self.status,
            "startup_time": self.started_at,
            "version": _version(),
            "sglang_api_version": SGLANG_RELEASE,
            "frontend": "macaron-embedded",
            # the bound address (the real port behind a wildcard): routers subscribe to it
            "kv_events_endpoint": getattr(self.engine, "kv_events_endpoint", lambda: None)(),
        }

    def models(self) -> dict[str, Any]:
        created = int(self.started_at)
        base = self.served_model_name()
        cards = [_model_card(base, base, None, self.context_length(), created)]
        for name, path in self.engine.loaded_adapters().items():
            cards.append(_model_card(name, path, base, None, created))
        return {"object": "list", "data": cards}

    def loads(self) -> dict[str, Any]:
        s = self.engine.stats()
        load = {
            "dp_rank": 0,
            "num_running_reqs": s.num_running,
            "num_waiting_reqs": s.num_queued,
            "num_used_tokens": s.kv_blocks_used * self.args.kv_block_size,
            "num_total_tokens": s.kv_blocks_total * self.args.kv_block_size,
            "max_total_num_tokens": self.args.max_total_tokens,
            "max_running_requests": self.args.max_running_requests,
            "token_usage": s.kv_blocks_used / max(s.kv_blocks_total, 1),
        }
        return {"timestamp": time.time(), "version": _version(), "accelerator": None, "num_accelerators": 0, "loads": [load]}


def _model_card(id_: str, root: str, parent: str | None, max_len: int | None, created: int) -> dict[str, Any]:
    return {"id": id_, "object": "model", "created": created, "owned_by": "macaron", "root": root, "parent": parent,
            "max_model_len": max_len}


def _version() -> str:
    try:
        return metadata.version("macaron-serve")
    except metadata.PackageNotFoundError:
        return "0.0.0"


# ---------------------------------------------------------------- the app


def create_app(engine: AsyncEngine, args: EngineArgs) -> FastAPI:
    """The engine's FastAPI app; its lifespan starts the engine and shuts it down.

    Raises InsecureBindError for a non-loopback host without `api_key`."""
    check_engine_bind(args.host, args.api_key_value)
    server = EngineServer(engine, args)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await engine.start()
        server.status = "up"
        logger.info("engine ready: %s, adapters %s", server.served_model_name(), sorted(engine.loaded_adapters()))
        try:
            yield
        finally:
            server.status = "exiting"
            await engine.shutdown()

    app = FastAPI(lifespan=lifespan, title="Macaron engine (SGLang native API)", openapi_url=None)
    app.state.server = server

    @app.exception_handler(Refused)
    async def _refused(_: Request, exc: Refused) -> Response:
        return exc.response

    @app.exception_handler(Exception)
    async def _failed(request: Request, exc: Exception) -> Response:
        logger.exception("%s %s failed", request.method, request.url.path)
        return engine_error(500, f"internal error: {exc}")

    def get(path: str, handler: Any) -> None:
        app.add_api_route(path, handler, methods=["GET"])

    app.add_api_route("/generate", server.generate, methods=["POST", "PUT"])
    app.add_api_route("/abort_request", server.abort_request, methods=["POST"])
    app.add_api_route("/load_lora_adapter", server.load_lora_adapter, methods=["POST"])
    app.add_api_route("/unload_lora_adapter", server.unload_lora_adapter, methods=["POST"])
    get("/health", server.health_generate)
    get("/health_generate", server.health_generate)
    get("/ready", lambda: Response(status_code=200 if server.status == "up" else 503))
    for path in ("/model_info", "/get_model_info"):
        get(path, server.model_info)
    for path in ("/server_info", "/get_server_info"):
        get(path, server.server_info)
    get("/v1/models", server.models)
    get("/v1/loads", server.loads)
    if args.enable_metrics:
        get("/metrics", lambda: Response(server.metrics.render(), media_type=CONTENT_TYPE_LATEST))
    if args.api_key_value:
        app.add_middleware(ApiKeyMiddleware, api_key=args.api_key_value)
    return app
