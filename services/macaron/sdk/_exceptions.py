"""The SDK's error tree, and the one function that maps a gRPC status to it (`error_from_rpc`).

    MacaronError
    └── APIError                        every failed call: message, code, request_id, reason
        ├── BadRequestError             INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE
        │   └── ContextLengthExceededError   prompt + output budget over the context limit
        ├── AuthenticationError         UNAUTHENTICATED
        ├── PermissionDeniedError       PERMISSION_DENIED
        ├── NotFoundError               NOT_FOUND
        ├── ConflictError               ALREADY_EXISTS, ABORTED
        ├── RateLimitError              RESOURCE_EXHAUSTED (`retry_after_s` from google.rpc.RetryInfo)
        ├── APIConnectionError          UNAVAILABLE: the router or what it depends on is unreachable
        │   └── APITimeoutError         DEADLINE_EXCEEDED: the call's deadline passed
        ├── APICancelledError           CANCELLED
        └── InternalServerError         INTERNAL, UNKNOWN, DATA_LOSS, UNIMPLEMENTED

Every error keeps the gRPC `code` it came from, so a server (the gateway) maps it to HTTP with
one table (`macaron.gateway.errors.HTTP_STATUS`).
"""

from __future__ import annotations

import re
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2

from macaron.sdk._constants import RETRY_AFTER_MS_KEY

CONTEXT_LENGTH_REASON = "context_length_exceeded"
"""google.rpc.ErrorInfo reason (and OpenAI error code) of a context overflow."""
_CONTEXT_MESSAGE = re.compile(r"context (limit|length)", re.IGNORECASE)
_STATUS_DETAILS_KEY = "grpc-status-details-bin"


class MacaronError(Exception):
    """Base of every error the SDK raises."""


class APIError(MacaronError):
    """A call that failed with a gRPC status."""

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode = grpc.StatusCode.UNKNOWN,
        request_id: str | None = None,
        reason: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        """The gRPC status code the server answered (or the client decided)."""
        self.request_id = request_id
        """The request id the call carried (`x-request-id`), for finding it in every hop's logs."""
        self.reason = reason
        """A machine-readable reason (google.rpc.ErrorInfo), e.g. `context_length_exceeded`."""
        self.retry_after_s = retry_after_s
        """Seconds the server asks the caller to wait before retrying (RESOURCE_EXHAUSTED)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code.name}, message={self.message!r}, request_id={self.request_id!r})"


class BadRequestError(APIError):
    """The request is invalid as sent; fix it, do not retry."""


class ContextLengthExceededError(BadRequestError):
    """The prompt plus the output budget exceed the context limit (never truncated silently)."""


class AuthenticationError(APIError):
    """No API key, or an unknown one."""


class PermissionDeniedError(APIError):
    """The key may not do this."""


class NotFoundError(APIError):
    """The thing asked for does not exist."""


class ConflictError(APIError):
    """The request conflicts with the current state."""


class RateLimitError(APIError):
    """Over the key's rate limit, or the service is overloaded; wait `retry_after_s`."""


class APIConnectionError(APIError):
    """The router, or a service behind it, cannot be reached (UNAVAILABLE)."""


class APITimeoutError(APIConnectionError):
    """The call's deadline passed (DEADLINE_EXCEEDED)."""


class APICancelledError(APIError):
    """The call was cancelled."""


class InternalServerError(APIError):
    """The server failed."""


_CLASSES: dict[grpc.StatusCode, type[APIError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: BadRequestError,
    grpc.StatusCode.FAILED_PRECONDITION: BadRequestError,
    grpc.StatusCode.OUT_OF_RANGE: BadRequestError,
    grpc.StatusCode.UNAUTHENTICATED: AuthenticationError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: ConflictError,
    grpc.StatusCode.ABORTED: ConflictError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: RateLimitError,
    grpc.StatusCode.UNAVAILABLE: APIConnectionError,
    grpc.StatusCode.DEADLINE_EXCEEDED: APITimeoutError,
    grpc.StatusCode.CANCELLED: APICancelledError,
}


def error_from_rpc(exc: grpc.RpcError, *, request_id: str | None = None) -> APIError:
    """The SDK error for a failed call (sync or asyncio); the only place codes become classes."""
    code = _call(exc, "code") or grpc.StatusCode.UNKNOWN
    message = _call(exc, "details") or f"the call failed with {code.name}"
    reason, retry_after_s = _details(_call(exc, "trailing_metadata") or ())
    cls = _CLASSES.get(code, InternalServerError)
    if cls is BadRequestError and (reason == CONTEXT_LENGTH_REASON or (reason is None and _CONTEXT_MESSAGE.search(message))):
        cls, reason = ContextLengthExceededError, CONTEXT_LENGTH_REASON
    return cls(message, code=code, request_id=request_id, reason=reason, retry_after_s=retry_after_s)


def _call(exc: grpc.RpcError, name: str) -> Any:
    method = getattr(exc, name, None)
    try:
        return method() if callable(method) else None
    except Exception:  # noqa: BLE001 - a half-built error must still map to something
        return None


def _details(metadata: Any) -> tuple[str | None, float | None]:
    """(ErrorInfo reason, retry delay in seconds) from trailing metadata, when present."""
    reason: str | None = None
    retry_after_s: float | None = None
    for key, value in metadata:
        if key == _STATUS_DETAILS_KEY and isinstance(value, bytes):
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                    info = error_details_pb2.RetryInfo()
                    detail.Unpack(info)
                    retry_after_s = info.retry_delay.ToMilliseconds() / 1000
                elif detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                    info_ = error_details_pb2.ErrorInfo()
                    detail.Unpack(info_)
                    reason = info_.reason.lower() or None
        elif key == RETRY_AFTER_MS_KEY and retry_after_s is None:
            try:
                retry_after_s = int(value) / 1000
            except (TypeError, ValueError):
                pass
    return reason, retry_after_s
