"""The client's error tree, and the one function that maps an engine answer to it.

    EngineClientError
    ├── EngineBadRequestError    400 (and 413, 422): fix the request, do not retry
    ├── EngineOverloadedError    503, 429: queue full or not ready; retry later or elsewhere
    ├── EngineUnavailableError   no connection, or another 5xx
    ├── EngineTimeoutError       the call's deadline passed (here, or 504: the engine stopped it at the deadline)
    └── EngineStatusError        any other HTTP status (404, ...)

Every error carries `status_code` (None without an HTTP answer) and the parsed `body`.
"""

from __future__ import annotations

from typing import Any


class EngineClientError(Exception):
    """Base of every error the engine client raises."""

    def __init__(self, message: str, *, status_code: int | None = None, body: Any = None, retryable: bool = False):
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.body = body
        self.retryable = retryable
        """True when the request cannot have run (refused or never sent), so sending it again is safe."""


class EngineBadRequestError(EngineClientError):
    """The engine refused the request as invalid (HTTP 400)."""


class EngineOverloadedError(EngineClientError):
    """The engine is overloaded or not ready (HTTP 503/429); safe to retry."""


class EngineUnavailableError(EngineClientError):
    """The engine cannot be reached, or failed (connect error, HTTP 5xx)."""


class EngineTimeoutError(EngineClientError):
    """The call's deadline passed before the engine answered in full."""


class EngineStatusError(EngineClientError):
    """An HTTP status the other classes do not cover (404, 405, ...)."""


RETRYABLE_STATUS = frozenset({429, 503})
"""Statuses that mean the request did not run, so sending it again is safe."""


def error_message(body: Any) -> str:
    """The message in any of SGLang's error bodies ({"error": str}, {"error": {"message"}}, {"message"})."""
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, str):
            return error
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if body.get("message"):
            return str(body["message"])
        if body.get("error_message"):
            return str(body["error_message"])
    return str(body) if body not in (None, "") else "no error message"


def make_status_error(status_code: int, body: Any) -> EngineClientError:
    """The exception for an engine answer with `status_code` (the only status → class mapping)."""
    message = f"engine answered {status_code}: {error_message(body)}"
    if status_code in (400, 413, 422):
        cls: type[EngineClientError] = EngineBadRequestError
    elif status_code in (429, 503):
        cls = EngineOverloadedError
    elif status_code == 504:  # the engine stopped the request at the deadline the client sent (x-macaron-timeout)
        cls = EngineTimeoutError
    elif status_code >= 500:
        cls = EngineUnavailableError
    else:
        cls = EngineStatusError
    return cls(message, status_code=status_code, body=body, retryable=status_code in RETRYABLE_STATUS)
