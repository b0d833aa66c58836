"""The gateway's HTTP routes: thin, each one call into the `Gateway` state built by the app."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from fastapi import APIRouter, Depends, Header, Request
from pydantic import BaseModel, ValidationError
from starlette.responses import JSONResponse, Response

from macaron import telemetry
from macaron.auth import AuthError, Principal, RateLimitedError
from macaron.gateway import protocol as p
from macaron.gateway import protocol_completions as pc
from macaron.gateway.body import parse_json_body
from macaron.gateway.deadline import RECEIVED_AT_KEY, TIMEOUT_HEADER, Deadline, client_deadline
from macaron.gateway.errors import GatewayError, bad_request, from_sdk, from_validation
from macaron.gateway.serving_chat import SESSION_HEADER
from macaron.gateway.stats import summarize
from macaron.sdk import MODELS, APIError

if TYPE_CHECKING:
    from macaron.gateway.app import Gateway

router = APIRouter()
BodyT = TypeVar("BodyT", bound=BaseModel)
TIMEOUT_DOC = ("Seconds the client waits for the whole answer (default: the openai clients' x-stainless-read-timeout, "
               "else gateway.router_timeout_s, which also caps it); past it the answer is a 504 of type `timeout`.")
_ERRORS = {status: {"model": p.ErrorResponse} for status in (400, 401, 413, 429, 503, 504)}


def _gateway(request: Request) -> Gateway:
    return request.app.state.gateway


def bearer_token(request: Request) -> str | None:
    """The key from `Authorization: Bearer <key>` (or `x-api-key`), else None."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return request.headers.get("x-api-key") or None


async def admit(request: Request) -> tuple[Principal, str | None]:
    """Authenticates and counts the request against its key's limit (401 / 429 otherwise)."""
    gateway = _gateway(request)
    token = bearer_token(request)
    try:
        return await gateway.guard.admit(token), token
    except AuthError as exc:
        gateway.metrics.auth_failures.labels(status="401").inc()
        raise GatewayError(401, str(exc), type="authentication_error", code="invalid_api_key") from None
    except RateLimitedError as exc:
        gateway.metrics.auth_failures.labels(status="429").inc()
        raise GatewayError(429, str(exc), type="rate_limit_error", code="rate_limit_exceeded",
                           retry_after_s=exc.retry_after_s) from None


async def read_chat_request(request: Request) -> p.ChatCompletionRequest:
    """The body as JSON whatever its content type (curl -d sends a form type), validated (400 otherwise)."""
    return await _read(request, p.ChatCompletionRequest)


async def _read(request: Request, model: type[BodyT]) -> BodyT:
    raw = await request.body()
    data = parse_json_body(raw, _gateway(request).settings.max_json_depth)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise from_validation(exc) from None


async def admit_chat(request: Request) -> tuple[Principal, str | None]:
    """Draining check, then auth and limits: before the body is validated, as OpenAI answers 401 first."""
    if _gateway(request).draining:
        raise GatewayError(503, "the gateway is shutting down; retry on another replica", type="service_unavailable",
                           code="draining", retry_after_s=1)
    return await admit(request)


@router.post(
    "/v1/chat/completions",
    response_model=p.ChatCompletion,
    responses={**_ERRORS, 200: {"content": {"text/event-stream": {}}, "description": "JSON, or SSE when stream is true"}},
    summary="Create a chat completion (OpenAI-compatible)",
    openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": {
        "$ref": "#/components/schemas/ChatCompletionRequest"}}}}},
)
async def chat_completions(
    request: Request,
    caller: tuple[Principal, str | None] = Depends(admit_chat),
    x_session_id: str | None = Header(None, description="Conversation id for specialist stickiness (else `user`)."),
    _timeout: str | None = Header(None, alias=TIMEOUT_HEADER, description=TIMEOUT_DOC),
) -> Response:
    gateway = _gateway(request)
    token = caller[1]
    body = await read_chat_request(request)
    problem = body.unsupported()
    if problem is not None:
        param, message = problem
        raise bad_request(message, param, "model_not_found" if param == "model" else "unsupported_value")
    if len(body.messages) > gateway.settings.max_messages:
        raise bad_request(f"messages has {len(body.messages)} entries; at most {gateway.settings.max_messages} are allowed",
                          "messages", "too_many_messages")
    session_id = request.headers.get(SESSION_HEADER) or x_session_id or body.user
    request_id = telemetry.current_request_id() or telemetry.bind_request_id(None)
    deadline = request_deadline(request, bool(body.stream))
    return await gateway.chat.create(body, api_key=token, session_id=session_id, request_id=request_id,
                                     disconnected=lambda: client_disconnected(request), deadline=deadline)


@router.post(
    "/v1/completions",
    response_model=pc.Completion,
    responses={**_ERRORS, 200: {"content": {"text/event-stream": {}}, "description": "JSON, or SSE when stream is true"}},
    summary="Create a text completion from a plain prompt (OpenAI's legacy completions)",
    openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": {
        "$ref": "#/components/schemas/CompletionRequest"}}}}},
)
async def completions(
    request: Request,
    caller: tuple[Principal, str | None] = Depends(admit_chat),
    x_session_id: str | None = Header(None, description="Conversation id for specialist stickiness (else `user`)."),
    _timeout: str | None = Header(None, alias=TIMEOUT_HEADER, description=TIMEOUT_DOC),
) -> Response:
    body = await _read(request, pc.CompletionRequest)
    problem = body.unsupported()
    if problem is not None:
        param, message = problem
        raise bad_request(message, param, "model_not_found" if param == "model" else "unsupported_value")
    session_id = request.headers.get(SESSION_HEADER) or x_session_id or body.user
    request_id = telemetry.current_request_id() or telemetry.bind_request_id(None)
    deadline = request_deadline(request, bool(body.stream))
    return await _gateway(request).completions.complete(body, api_key=caller[1], session_id=session_id,
                                                       request_id=request_id,
                                                       disconnected=lambda: client_disconnected(request),
                                                       deadline=deadline)


def request_deadline(request: Request, stream: bool) -> Deadline:
    """The client's deadline (x-macaron-timeout, or the openai clients' read timeout), capped by router_timeout_s."""
    settings = _gateway(request).settings
    return client_deadline(request.headers, stream=stream, cap_s=settings.router_timeout_s,
                           margin_s=settings.deadline_margin_s, received_at=request.scope.get(RECEIVED_AT_KEY))


async def client_disconnected(request: Request) -> None:
    """Returns when the client closes the connection (the body has been read: the next message is the end)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


@router.get("/v1/models", response_model=p.ModelList, responses=_ERRORS, summary="List the models")
async def list_models(request: Request, _: tuple[Principal, str | None] = Depends(admit)) -> p.ModelList:
    created = _gateway(request).created
    return p.ModelList(data=[p.Model(id=name, created=created) for name in MODELS])


@router.get("/v1/models/{model_id}", response_model=p.Model, responses={**_ERRORS, 404: {"model": p.ErrorResponse}})
async def retrieve_model(model_id: str, request: Request, _: tuple[Principal, str | None] = Depends(admit)) -> p.Model:
    if model_id not in MODELS:
        raise GatewayError(404, f"The model `{model_id}` does not exist", type="not_found_error", param="model",
                           code="model_not_found")
    return p.Model(id=model_id, created=_gateway(request).created)


@router.delete(
    "/v1/sessions/{session_id}",
    status_code=204,
    responses={**_ERRORS, 404: {"model": p.ErrorResponse}},
    summary="End a conversation kept under a session id (the x-session-id header's)",
)
async def end_session(session_id: str, request: Request,
                      auth: tuple[Principal, str | None] = Depends(admit_chat)) -> Response:
    """The router forgets the session and stops counting it as live on its replica, in every router, at once
    (otherwise it counts until its windows pass). 204: ended; 404: this key has no such session."""
    gateway = _gateway(request)
    client = gateway.client.with_options(api_key=auth[1] or "")
    try:
        ended = await client.sessions.end(session_id, request_id=request.headers.get(telemetry.REQUEST_ID_KEY),
                                          timeout=gateway.settings.router_timeout_s)
    except APIError as exc:
        raise from_sdk(exc) from None
    if not ended:
        raise GatewayError(404, f"no session `{session_id}` for this key (never started, expired, or ended "
                                "already)", type="not_found_error", param="session_id", code="session_not_found")
    return Response(status_code=204)


@router.get("/healthz", summary="Liveness: the process answers")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: the router answers SERVING and the gateway is not draining")
async def readyz(request: Request) -> Response:
    gateway = _gateway(request)
    if gateway.draining:
        return JSONResponse({"status": "draining"}, status_code=503)
    if not await gateway.client.health(timeout=2.0):
        return JSONResponse({"status": "router unavailable", "router": gateway.settings.router_target}, status_code=503)
    return JSONResponse({"status": "ready", "dev_mode": gateway.guard.dev_mode, "store_degraded": gateway.guard.degraded})


@router.get(
    "/stats",
    responses={401: {"model": p.ErrorResponse}},
    summary="Live figures as JSON: route mix, time to route p50/p99, cached-token share, versions per specialist",
)
async def stats(request: Request) -> dict:
    """Same auth as the API (a key, or none in dev mode), not counted against the key's request limit:
    the playground polls it every few seconds."""
    gateway = _gateway(request)
    try:
        gateway.guard.authenticate(bearer_token(request))
    except AuthError as exc:
        gateway.metrics.auth_failures.labels(status="401").inc()
        raise GatewayError(401, str(exc), type="authentication_error", code="invalid_api_key") from None
    return summarize(gateway.metrics)


@router.get("/metrics", summary="Prometheus metrics", include_in_schema=True)
async def metrics(request: Request) -> Response:
    from prometheus_client import CONTENT_TYPE_LATEST

    return Response(_gateway(request).metrics.render(), media_type=CONTENT_TYPE_LATEST)
