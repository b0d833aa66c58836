"""SGLang's /generate wire format for the embedded engine: bodies, error bodies, translation, SSE.

Split from http_server.py so the handlers read in one sitting: this module knows SGLang's shapes
(release 0.5.23) and how they map onto the engine's GenerateRequest; it holds no state.
See http_server.py's docstring for the table of error bodies.
"""

from __future__ import annotations

import json
import math
import uuid
from typing import Any, Mapping

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, ValidationError

from macaron.engine.protocol import (
    EngineError,
    EngineNotReadyError,
    EngineOverloadedError,
    GenerateRequest,
    RequestOutput,
)
from macaron.engine.sampling_params import SamplingParams
from macaron.telemetry import DEADLINE_HEADER

SGLANG_RELEASE = "0.5.23"
"""The SGLang release whose HTTP API this server matches."""
HEALTH_CHECK_TIMEOUT_S = 20.0
"""How long /health_generate waits for its one token (SGLang's default)."""
SAMPLING_FIELDS: tuple[str, ...] = (*SamplingParams.model_fields, "choice")
"""Keys SGLang's schema accepts in sampling_params; any other key is a 400 there too."""
IGNORED_FIELDS: dict[str, str] = {
    "model": "added by routers (smg); the engine serves one base model, adapters go in lora_path",
    "log_metrics": "applied: false keeps the request out of /metrics",
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
    # logprobs of output tokens (prompt logprobs and token_ids_logprob are refused)
    return_logprob: bool | list[bool] | None = None
    top_logprobs_num: int | list[int] | None = None
    logprob_start_len: int | list[int] | None = None
    return_text_in_logprobs: bool | None = None
    token_ids_logprob: list[int] | list[list[int]] | None = None
    # refused when set: the engine cannot honour them
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


# DEADLINE_HEADER (macaron.telemetry): seconds the caller still waits for a /generate answer (a positive decimal; the
# project's engine client sends it, the gateway reads the same header from its clients). SGLang has no per-request deadline, only the server-wide
# SGLANG_REQ_WAITING_TIMEOUT and SGLANG_REQ_RUNNING_TIMEOUT, and ignores the header; this engine aborts the request
# when the time is up, queued or running, so a caller that vanished without closing its connection leaves no work.
DEADLINE_STATUS = 504
"""The status of a request stopped at its deadline (SGLang's global timeouts say 503; a client would retry that)."""


def request_timeout(headers: Mapping[str, str]) -> float | None:
    """The caller's remaining seconds from DEADLINE_HEADER, None without it; a 400 for a value that is no
    positive number (the gateway answers its own clients the same)."""
    raw = headers.get(DEADLINE_HEADER)
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise Refused(engine_error(400, f"{DEADLINE_HEADER} must be a positive number of seconds; got {raw[:40]!r}"))
    return seconds


def deadline_reason() -> dict[str, Any]:
    """The finish reason of a request stopped at its deadline: an abort with a status, as SGLang's timeouts."""
    return {"type": "abort", "message": f"the request's deadline ({DEADLINE_HEADER}) passed; the engine stopped it",
            "status_code": DEADLINE_STATUS}


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


def refusal_for(exc: EngineError) -> Refused:
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


async def read_body(request: Request, model: type[BaseModel]) -> Any:
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
        or isinstance(obj.return_logprob, list)
        or isinstance(obj.top_logprobs_num, list)
        or isinstance(obj.logprob_start_len, list)
    )
    if batch:
        raise Refused(engine_error(400, "batch requests (lists of prompts) are not supported; send one request per prompt."))
    if obj.logprob_start_len not in (None, -1):
        raise Refused(engine_error(400, "logprob_start_len must be -1 (output tokens only): prompt logprobs are not "
                                        "supported by this engine."))
    if obj.top_logprobs_num is not None and obj.top_logprobs_num < 0:
        raise Refused(engine_error(400, f"top_logprobs_num must be at least 0, got {obj.top_logprobs_num}."))
    unsupported = {
        "token_ids_logprob": obj.token_ids_logprob,
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
        return_logprob=bool(obj.return_logprob),
        top_logprobs_num=int(obj.top_logprobs_num or 0) if obj.return_logprob else 0,
    )


class ResponseEncoder:
    """Turns cumulative RequestOutputs into SGLang response objects (cumulative or incremental)."""

    def __init__(self, incremental: bool, prompt_token_ids: list[int] | None, token_text: Any = None):
        self.incremental = incremental
        self.prompt_token_ids = prompt_token_ids
        self.token_text = token_text
        """With return_text_in_logprobs: token id -> its text (the tokenizer's decode), else None."""
        self.sent_text = 0
        self.sent_ids = 0

    def encode(self, out: RequestOutput) -> dict[str, Any]:
        text, ids = out.text, out.output_ids
        start = self.sent_ids if self.incremental else 0
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
        if out.output_token_logprobs is not None:
            # SGLang's shape: (logprob, token id, text or None) per position; lists of them for the top ones
            meta["output_token_logprobs"] = [self._entry(e) for e in out.output_token_logprobs[start:]]
            meta["output_top_logprobs"] = [[self._entry(e) for e in top] for top in (out.output_top_logprobs or [])[start:]]
        body: dict[str, Any] = {"text": text, "output_ids": list(ids), "meta_info": meta}
        if self.prompt_token_ids is not None:
            body["prompt_token_ids"] = self.prompt_token_ids
        return body


    def _entry(self, entry: tuple[float, int]) -> list[Any]:
        logprob, token = entry
        return [logprob, token, self.token_text(token) if self.token_text is not None else None]


def sse_event(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


async def wait_for_disconnect(request: Request) -> None:
    """Returns when the client hangs up (the body was already read, so only that can arrive)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
