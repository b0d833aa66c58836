"""Domain errors of a specialist; the servicer maps each to one gRPC status (nothing here imports grpc)."""

from __future__ import annotations


class SpecialistError(Exception):
    """Base of the errors a request can end with; the message is safe to show the caller."""


class BadRequestError(SpecialistError):
    """Bad input (INVALID_ARGUMENT): the caller must change the request."""


class ContextOverflowError(BadRequestError):
    """Prompt plus output budget exceed the context limit; never truncated silently."""


class OverloadedError(SpecialistError):
    """Too much load (RESOURCE_EXHAUSTED); retry after `retry_after_s`."""

    def __init__(self, message: str, retry_after_s: float):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class UnavailableError(SpecialistError):
    """No engine replica answers, or the server is draining (UNAVAILABLE)."""


class DeadlineExceededError(SpecialistError):
    """The call's deadline passed (DEADLINE_EXCEEDED)."""


class OutputTruncatedError(SpecialistError):
    """A structured answer (UI, forced tool call) did not fit in max_new_tokens (OUT_OF_RANGE)."""


class OutputInvalidError(SpecialistError):
    """The engine's output failed validation although it finished (INTERNAL)."""
