"""Errors in OpenAI's shape, and the one table that maps gRPC status codes to HTTP.

Every error the gateway answers has the body
`{"error": {"message": ..., "type": ..., "param": ..., "code": ...}}` and an `x-request-id`.

| gRPC status (router / SDK)                       | HTTP | error.type              | notes                                  |
|--------------------------------------------------|------|-------------------------|----------------------------------------|
| INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE | 400 | invalid_request_error  | code `context_length_exceeded` on overflow |
| UNAUTHENTICATED                                  | 401  | authentication_error    | code `invalid_api_key`                 |
| PERMISSION_DENIED                                | 403  | permission_error        |                                        |
| NOT_FOUND                                        | 404  | not_found_error         |                                        |
| ALREADY_EXISTS, ABORTED                          | 409  | conflict_error          |                                        |
| RESOURCE_EXHAUSTED                               | 429  | rate_limit_error        | `Retry-After` from google.rpc.RetryInfo |
| CANCELLED                                        | 499  | cancelled               | the client went away                   |
| UNKNOWN, INTERNAL, DATA_LOSS                     | 500  | server_error            |                                        |
| UNIMPLEMENTED                                    | 501  | server_error            |                                        |
| UNAVAILABLE                                      | 503  | service_unavailable     | `Retry-After: 1`                       |
| DEADLINE_EXCEEDED                                | 504  | timeout                 |                                        |

The gateway's own checks use the same envelope: 400 (validation, unsupported values, unknown
model, too many messages), 401 (no or unknown key), 404 (unknown path or model id),
413 (body over `gateway.max_body_bytes`), 429 (the key's rate limit, or `server_overloaded` from
admission control, both with `Retry-After`),
503 (draining, router unreachable), 504 (the client's deadline passed: macaron.gateway.deadline).
"""

from __future__ import annotations

import math
from typing import Any

import grpc
from pydantic import ValidationError
from starlette.responses import JSONResponse

from macaron.sdk import APIError

HTTP_STATUS: dict[grpc.StatusCode, tuple[int, str]] = {
    grpc.StatusCode.INVALID_ARGUMENT: (400, "invalid_request_error"),
    grpc.StatusCode.FAILED_PRECONDITION: (400, "invalid_request_error"),
    grpc.StatusCode.OUT_OF_RANGE: (400, "invalid_request_error"),
    grpc.StatusCode.UNAUTHENTICATED: (401, "authentication_error"),
    grpc.StatusCode.PERMISSION_DENIED: (403, "permission_error"),
    grpc.StatusCode.NOT_FOUND: (404, "not_found_error"),
    grpc.StatusCode.ALREADY_EXISTS: (409, "conflict_error"),
    grpc.StatusCode.ABORTED: (409, "conflict_error"),
    grpc.StatusCode.RESOURCE_EXHAUSTED: (429, "rate_limit_error"),
    grpc.StatusCode.CANCELLED: (499, "cancelled"),
    grpc.StatusCode.UNKNOWN: (500, "server_error"),
    grpc.StatusCode.INTERNAL: (500, "server_error"),
    grpc.StatusCode.DATA_LOSS: (500, "server_error"),
    grpc.StatusCode.UNIMPLEMENTED: (501, "server_error"),
    grpc.StatusCode.UNAVAILABLE: (503, "service_unavailable"),
    grpc.StatusCode.DEADLINE_EXCEEDED: (504, "timeout"),
}
"""gRPC status code → (HTTP status, OpenAI error type): the only place the two meet."""
UNAVAILABLE_RETRY_AFTER_S = 1


class GatewayError(Exception):
    """An error answered in OpenAI's shape."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.retry_after_s = retry_after_s

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def headers(self) -> dict[str, str]:
        if self.retry_after_s is None:
            return {}
        return {"retry-after": str(max(1, math.ceil(self.retry_after_s)))}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers())


def from_sdk(exc: APIError) -> GatewayError:
    """The HTTP error for an SDK (gRPC) error, through HTTP_STATUS."""
    status, kind = HTTP_STATUS.get(exc.code, (500, "server_error"))
    retry_after = exc.retry_after_s
    if status == 429 and retry_after is None:
        retry_after = 1.0
    if status == 503 and retry_after is None:
        retry_after = UNAVAILABLE_RETRY_AFTER_S
    code = exc.reason or (exc.code.name.lower() if status >= 500 or status in (429, 504) else None)
    if status == 401:
        code = "invalid_api_key"
    if status == 429:
        code = code if code and code != "resource_exhausted" else "rate_limit_exceeded"
    return GatewayError(status, exc.message, type=kind, code=code, retry_after_s=retry_after)


def from_validation(errors: list[dict[str, Any]] | ValidationError) -> GatewayError:
    """A 400 naming the invalid field as OpenAI does (`messages[0].content`).

    Of several errors (a union tries each branch) the deepest one says the most.
    """
    items = errors.errors(include_url=False) if isinstance(errors, ValidationError) else list(errors)
    if not items:
        return GatewayError(400, "invalid request", code="invalid_value")
    first = max(items, key=lambda e: len(e.get("loc", ())))
    param = _param(tuple(first.get("loc", ())))
    kind = first.get("type", "")
    message = str(first.get("msg", "invalid value"))
    if kind == "json_invalid":
        return GatewayError(400, "We could not parse the JSON body of your request.", code="invalid_json")
    if kind == "extra_forbidden":
        message = f"Unrecognized request argument supplied: {param}"
    elif kind == "missing":
        message = f"Missing required parameter: '{param}'."
    elif param:
        message = f"Invalid value for '{param}': {message}"
    return GatewayError(400, message, param=param or None, code=_code(kind))


_UNION_TAGS = {"system", "developer", "user", "assistant", "tool", "text", "image_url", "input_audio", "file",
               "str", "int", "float", "bool", "dict", "list", "none", "body"}


def _param(loc: tuple[Any, ...]) -> str:
    out = ""
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        text = str(part)
        tag = text in _UNION_TAGS and not (i == len(loc) - 1 and out)  # a field may be called `text`
        if tag or any(c in text for c in "[('-") or text[:1].isupper():
            continue  # pydantic's union branches and validators are not field names
        out += f".{text}" if out else text
    return out


def _code(kind: str) -> str:
    return {"missing": "missing_required_parameter", "extra_forbidden": "unknown_parameter"}.get(kind, "invalid_value")


def bad_request(message: str, param: str | None = None, code: str | None = "invalid_value") -> GatewayError:
    return GatewayError(400, message, param=param, code=code)
