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

Unlike SGLang, a streaming request that the engine refuses is answered with its status code
before the stream starts (the engine validates synchronously), never with an error frame.

Top-level /generate fields SGLang accepts but this engine does not apply are listed in
IGNORED_FIELDS; fields it cannot honour (logprobs, images, sessions, ...) are refused with
a 400 naming the field. Unknown top-level fields are ignored, as SGLang does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
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
from pydantic import BaseModel, ConfigDict, ValidationError

from macaron.engine.args import EngineArgs
from macaron.engine.metrics import ServerMetrics
from macaron.engine.protocol import (
    AsyncEngine,
    EngineError,
    EngineNotReadyError,
    EngineOverloadedError,
    GenerateRequest,
    RequestOutput,
    RequestStream,
)
from macaron.engine.sampling_params import SamplingParams

logger = logging.getLogger(__name__)

SGLANG_RELEASE = "0.5.23"
"""The SGLang release whose HTTP API this server matches."""
HEALTH_CHECK_TIMEOUT_S = 20.0
"""How long /health_generate waits for its one token (SGLang's default)."""
SAMPLING_FIELDS: tuple[str, ...] = (*SamplingParams.model_fields, "choice")
"""Keys SGLang's schema accepts in sampling_params; any other key is a 400 there too."""
IGNORED_FIELDS: dict[str, str] = {
    "model": "added by routers (smg); the engine serves one base model, adapters go in lora_path",
    "log_metrics": "applied: false keeps the request out of /metrics",
    "return_text_in_logprobs": "no logprobs are returned, so there is no text to add",
    "background": "OpenAI Responses API only",
    "no_logs": "the engine logs no request contents anyway",
    "return_bytes": "image generation only",
    "return_entropy": "accepted only as false",
    "bootstrap_host, bootstrap_port, bootstrap_room, bootstrap_pair_key, decode_tp_size": "no prefill/decode split",
    "routed_dp_rank, data_parallel_rank, disagg_prefill_dp_rank": "one data-parallel rank",
    "priority, routing_key, extra_key, cache_salt": "first-come scheduling; the prefix cache is keyed by adapter",
    "session_id, conversation_id, custom_labels, require_reasoning, max_thinking_tokens, kv_hints": "no effect here",
}


# ---------------------------------------------------------------- request bodies (SGLang names)


class GenerateReqInput(BaseModel):
    """The /generate body: SGLang's GenerateReqInput fields this server reads, checks or ignores."""

    model_config = ConfigDict(extra="ignore")

    text: str | list[str] | None = None
    input_ids: list[int] | list[list[int]] | None = None
    sampling_params: dict[str, Any] | list[dict[str, Any]] | None = None
    rid: str | list[str] | None = None
    stream: bool = False
    lora_path: str | list[str | None] | None = None
    log_metrics: bool = True
    return_prompt_token_ids: bool = False
    # refused when set: the engine cannot honour them
    return_logprob: bool | list[bool] | None = None
    return_hidden_states: bool | str | list[Any] | None = None
    return_routed_experts: bool = False
    return_entropy: bool = False
    return_sampling_mask: bool | list[bool] | None = None
    custom_logit_processor: str | list[str | None] | None = None
    session_params: dict[str, Any] | None = None
    input_embeds: Any = None
    image_data: Any = None
    video_data: Any = None
    audio_data: Any = None
    # accepted and ignored (see IGNORED_FIELDS)
    model: str | None = None
    return_text_in_logprobs: bool | None = None
    logprob_start_len: int | list[int] | None = None
    top_logprobs_num: int | list[int] | None = None
    token_ids_logprob: list[int] | list[list[int]] | None = None
    background: bool = False
    no_logs: bool = False
    return_bytes: bool = False
    bootstrap_host: str | list[str | None] | None = None
    bootstrap_port: int | list[int | None] | None = None
    bootstrap_room: int | list[int | None] | None = None
    bootstrap_pair_key: str | list[str | None] | None = None
    decode_tp_size: int | list[int | None] | None = None
    routed_dp_rank: int | None = None
    data_parallel_rank: int | None = None
    priority: int | None = None
    routing_key: str | None = None
    session_id: str | None = None
    custom_labels: dict[str, str] | None = None


class LoadLoRAAdapterReqInput(BaseModel):
    """POST /load_lora_adapter body (SGLang's LoadLoRAAdapterReqInput)."""

    model_config = ConfigDict(extra="ignore")
    lora_name: str
    lora_path: str
    pinned: bool = False


class UnloadLoRAAdapterReqInput(BaseModel):
    """POST /unload_lora_adapter body (SGLang's UnloadLoRAAdapterReqInput)."""

    model_config = ConfigDict(extra="ignore")
    lora_name: str


class AbortReq(BaseModel):
    """POST /abort_request body (SGLang's AbortReq)."""

    model_config = ConfigDict(extra="ignore")
    rid: str | None = ""
    abort_all: bool = False


# ---------------------------------------------------------------- error bodies


class Refused(Exception):
    """A request answered with an error response instead of running."""

    def __init__(self, response: Response):
        super().__init__(response.status_code)
        self.response = response


def error_response(status: int, message: str) -> JSONResponse:
    """SGLang's ErrorResponse body (its validation and HTTPException handlers)."""
    kind = "Bad Request" if status == 400 else str(status)
    body = {"object": "error", "message": message, "type": kind, "param": None, "code": status}
    return JSONResponse(body, status_code=status)


def contract_error(message: str) -> JSONResponse:
    """SGLang's schema-contract refusal: the message is the whole `error` value."""
    return JSONResponse({"error": message}, status_code=400)


def engine_error(status: int, message: str) -> JSONResponse:
    """SGLang's answer to a request the engine refuses (`_create_error_response`)."""
    kind = "invalid_request_error" if status == 400 else "server_error"
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)


def _from_engine_error(exc: EngineError) -> Refused:
    status = exc.status_code
    if isinstance(exc, (EngineOverloadedError, EngineNotReadyError)) or status != 400:
        return Refused(error_response(status, str(exc)))
    return Refused(engine_error(status, str(exc)))


def _describe(exc: ValidationError, prefix: str = "") -> str:
    """One line per field ("sampling_params.top_k: Input should be a valid integer")."""
    seen: dict[str, str] = {}
    for err in exc.errors(include_url=False):
        field = str(err["loc"][0]) if err["loc"] else ""
        seen.setdefault(field, err["msg"])
    return "; ".join(f"{prefix}{field}: {msg}" if field else msg for field, msg in seen.items())


async def _read_body(request: Request, model: type[BaseModel]) -> Any:
    """Parses the JSON body into `model`, refusing it the way SGLang does."""
    try:
        data = json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise Refused(error_response(400, f"JSON decode error: {exc}")) from None
    if not isinstance(data, dict):
        raise Refused(error_response(400, f"the request body must be a JSON object, got {type(data).__name__}"))
    try:
        return model.model_validate(data, strict=True)
    except ValidationError as exc:
        raise Refused(contract_error(_describe(exc))) from None


# ---------------------------------------------------------------- /generate translation


def _sampling_params(raw: dict[str, Any] | None) -> SamplingParams:
    raw = dict(raw or {})
    for key in raw:
        if key not in SAMPLING_FIELDS:
            expected = ", ".join(f"`{f}`" for f in SAMPLING_FIELDS)
            raise Refused(contract_error(f"unknown field `{key}`, expected one of {expected}"))
    if raw.pop("choice", None):
        raise Refused(engine_error(400, "sampling_params.choice is not supported by this engine; use regex."))
    try:
        return SamplingParams.model_validate(raw, strict=True)
    except ValidationError as exc:
        raise Refused(contract_error(_describe(exc, "sampling_params."))) from None


def _refuse_unsupported(obj: GenerateReqInput) -> None:
    batch = (
        isinstance(obj.text, list)
        or bool(obj.input_ids and isinstance(obj.input_ids[0], list))
        or isinstance(obj.sampling_params, list)
        or isinstance(obj.rid, list)
        or isinstance(obj.lora_path, list)
    )
    if batch:
        raise Refused(engine_error(400, "batch requests (lists of prompts) are not supported; send one request per prompt."))
    unsupported = {
        "return_logprob": obj.return_logprob,
        "return_hidden_states": obj.return_hidden_states,
        "return_routed_experts": obj.return_routed_experts,
        "return_entropy": obj.return_entropy,
        "return_sampling_mask": obj.return_sampling_mask,
        "session_params": obj.session_params,
        "input_embeds": obj.input_embeds,
        "image_data": obj.image_data,
        "video_data": obj.video_data,
        "audio_data": obj.audio_data,
    }
    for name, value in unsupported.items():
        if value:
            raise Refused(engine_error(400, f"{name} is not supported by this engine; leave it unset."))
    if obj.custom_logit_processor:
        raise Refused(
            engine_error(400, "The server is not configured to enable custom logit processor (not supported here).")
        )
    if (obj.text is None) == (obj.input_ids is None):
        raise Refused(engine_error(400, "exactly one of text or input_ids must be given."))


def to_engine_request(obj: GenerateReqInput) -> GenerateRequest:
    """Checks a /generate body and builds the engine's request (raises Refused)."""
    _refuse_unsupported(obj)
    prompt: str | list[int] = obj.text if obj.text is not None else list(obj.input_ids or [])
    return GenerateRequest(
        rid=obj.rid or uuid.uuid4().hex,
        prompt=prompt,
        sampling=_sampling_params(obj.sampling_params),
        lora_path=obj.lora_path,
        stream=obj.stream,
    )


class _Encoder:
    """Turns cumulative RequestOutputs into SGLang response objects (cumulative or incremental)."""

    def __init__(self, incremental: bool, prompt_token_ids: list[int] | None):
        self.incremental = incremental
        self.prompt_token_ids = prompt_token_ids
        self.sent_text = 0
        self.sent_ids = 0

    def encode(self, out: RequestOutput) -> dict[str, Any]:
        text, ids = out.text, out.output_ids
        if self.incremental:
            text, ids = text[self.sent_text :], ids[self.sent_ids :]
            self.sent_text, self.sent_ids = len(out.text), len(out.output_ids)
        meta = {
            "id": out.rid,
            "finish_reason": out.finish_reason,
            "prompt_tokens": out.prompt_tokens,
            "completion_tokens": out.completion_tokens,
            "cached_tokens": out.cached_tokens,
            "e2e_latency": out.e2e_latency,
            "weight_version": "default",
            "reasoning_tokens": 0,
        }
        body: dict[str, Any] = {"text": text, "output_ids": list(ids), "meta_info": meta}
        if self.prompt_token_ids is not None:
            body["prompt_token_ids"] = self.prompt_token_ids
        return body


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


async def _wait_for_disconnect(request: Request) -> None:
    """Returns when the client hangs up (the body was already read, so only that can arrive)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


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

    def _submit(self, req: GenerateRequest) -> RequestStream:
        if self.status != "up":
            raise Refused(error_response(503, f"The server is {self.status}; retry later."))
        try:
            stream = self.engine.submit(req)
        except EngineError as exc:
            raise _from_engine_error(exc) from None
        self.active[req.rid] = stream
        return stream

    async def _outputs(
        self, stream: RequestStream, request: Request, *, stream_mode: bool, log_metrics: bool
    ) -> AsyncIterator[RequestOutput]:
        """Yields a request's outputs; aborts it when the client leaves or the consumer stops."""
        watcher = asyncio.create_task(_wait_for_disconnect(request))
        watcher.add_done_callback(lambda task: self._abort_if_disconnected(task, stream))
        last: RequestOutput | None = None
        first_token_at: float | None = None
        try:
            async for out in stream:
                last = out
                if first_token_at is None and out.completion_tokens > 0:
                    first_token_at = out.e2e_latency
                yield out
                if out.finished:
                    break
        finally:
            watcher.cancel()
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
        obj: GenerateReqInput = await _read_body(request, GenerateReqInput)
        req = to_engine_request(obj)
        encoder = _Encoder(obj.stream and self.args.incremental_streaming_output, self._prompt_token_ids(obj))
        stream = self._submit(req)
        outputs = self._outputs(stream, request, stream_mode=obj.stream, log_metrics=obj.log_metrics)
        if obj.stream:
            return StreamingResponse(self._sse_body(outputs, encoder), media_type="text/event-stream")
        return await self._single_response(outputs, encoder)

    async def _single_response(self, outputs: AsyncIterator[RequestOutput], encoder: _Encoder) -> Response:
        last: RequestOutput | None = None
        try:
            async for out in outputs:
                last = out
        except EngineError as exc:
            return _from_engine_error(exc).response
        if last is None:
            return engine_error(500, "the engine ended the request without output")
        reason = last.finish_reason or {}
        status = reason.get("status_code") if reason.get("type") == "abort" else None
        if isinstance(status, int) and 400 <= status < 600:
            message = str(reason.get("message") or "aborted")
            return engine_error(400, message) if status == 400 else error_response(status, message)
        return JSONResponse(encoder.encode(last))

    async def _sse_body(self, outputs: AsyncIterator[RequestOutput], encoder: _Encoder) -> AsyncIterator[bytes]:
        try:
            async for out in outputs:
                yield _sse(encoder.encode(out))
        except Exception as exc:  # noqa: BLE001 - reported in the stream, as SGLang does
            status = exc.status_code if isinstance(exc, EngineError) else 500
            kind = "invalid_request_error" if status == 400 else "server_error"
            logger.warning("stream failed: %s", exc)
            yield _sse({"error": {"message": str(exc), "type": kind, "code": status, "retryable": status >= 500}})
        yield b"data: [DONE]\n\n"

    async def abort_request(self, request: Request) -> Response:
        obj: AbortReq = await _read_body(request, AbortReq)
        rids = list(self.active) if obj.abort_all else [obj.rid] if obj.rid else []
        for rid in rids:
            await self.engine.abort(rid)
        return Response(status_code=200)

    # -- adapters

    def _lora_result(self, error: str | None) -> JSONResponse:
        body = {"success": error is None, "error_message": error or "", "loaded_adapters": self.engine.loaded_adapters()}
        return JSONResponse(body, status_code=200 if error is None else 400)

    async def load_lora_adapter(self, request: Request) -> Response:
        obj: LoadLoRAAdapterReqInput = await _read_body(request, LoadLoRAAdapterReqInput)
        try:
            await self.engine.load_lora_adapter(obj.lora_name, obj.lora_path, pinned=obj.pinned)
        except EngineError as exc:
            return self._lora_result(str(exc))
        return self._lora_result(None)

    async def unload_lora_adapter(self, request: Request) -> Response:
        obj: UnloadLoRAAdapterReqInput = await _read_body(request, UnloadLoRAAdapterReqInput)
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
        return {
            **self.args.model_dump(mode="json"),
            "served_model_name": self.served_model_name(),
            "context_length": self.context_length(),
            "enable_lora": True,
            "loaded_adapters": self.engine.loaded_adapters(),
            "memory_usage": dataclasses.asdict(memory),
            "internal_states": [dataclasses.asdict(self.engine.stats())],
            "status": self.status,
            "startup_time": self.started_at,
            "version": _version(),
            "sglang_api_version": SGLANG_RELEASE,
            "frontend": "macaron-embedded",
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
    """The engine's FastAPI app; its lifespan starts the engine and shuts it down."""
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
    return app
