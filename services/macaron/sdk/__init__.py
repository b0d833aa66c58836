"""Macaron Serve's gRPC client SDK: typed sync and async clients of the L0 router.

    from macaron.sdk import MacaronClient

    with MacaronClient("127.0.0.1:50051", api_key="mk-...") as client:
        result = client.chat.create(messages=[{"role": "user", "content": "Write a haiku"}])
        print(result.route.specialist, result.route.reason, result.text)

        with client.chat.create(messages=[...], specialist="code", stream=True) as stream:
            for chunk in stream:
                print(chunk.text, end="")
"""

from macaron.sdk._client import AsyncMacaronClient, MacaronClient
from macaron.sdk._constants import DEFAULT_MAX_RETRIES, DEFAULT_TARGET, DEFAULT_TIMEOUT_S, MODELS
from macaron.sdk._exceptions import (
    APICancelledError,
    APIConnectionError,
    APIError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    ContextLengthExceededError,
    InternalServerError,
    MacaronError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
)
from macaron.sdk._streaming import AsyncStream, Stream
from macaron.sdk.types import (
    ChatChunk,
    ChatResult,
    Classification,
    FunctionCall,
    Route,
    TokenLogprob,
    ToolCall,
    ToolCallDelta,
    TopLogprob,
    Usage,
)

__all__ = [
    "APICancelledError",
    "APIConnectionError",
    "APIError",
    "APITimeoutError",
    "AsyncMacaronClient",
    "AsyncStream",
    "AuthenticationError",
    "BadRequestError",
    "ChatChunk",
    "ChatResult",
    "Classification",
    "ConflictError",
    "ContextLengthExceededError",
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_TARGET",
    "DEFAULT_TIMEOUT_S",
    "FunctionCall",
    "InternalServerError",
    "MODELS",
    "MacaronClient",
    "MacaronError",
    "NotFoundError",
    "PermissionDeniedError",
    "RateLimitError",
    "Route",
    "Stream",
    "TokenLogprob",
    "ToolCall",
    "ToolCallDelta",
    "TopLogprob",
    "Usage",
]
