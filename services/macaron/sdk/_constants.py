"""Defaults of the gRPC client SDK, in one place (as openai-python's `_constants.py`)."""

from __future__ import annotations

from macaron.ports import ROUTER_PORT

DEFAULT_TARGET = f"127.0.0.1:{ROUTER_PORT}"
"""The router a client talks to when given no target and `$MACARON_ROUTER` is unset."""
TARGET_ENV = "MACARON_ROUTER"
"""Environment variable read for the router's `host:port` when no target is given."""
API_KEY_ENV = "MACARON_API_KEY"
"""Environment variable read for the API key when none is given."""
DEFAULT_TIMEOUT_S = 600.0
"""Deadline of one call, retries and the whole stream included (openai-python's default)."""
DEFAULT_MAX_RETRIES = 2
"""Retries of a call that failed with UNAVAILABLE or RESOURCE_EXHAUSTED before its first chunk (nothing ran yet)."""
INITIAL_RETRY_DELAY_S = 0.5
MAX_RETRY_DELAY_S = 8.0
MAX_RETRY_AFTER_S = 60.0
"""A server's suggested delay is honoured up to this; a longer one is not waited for (openai-python's rule)."""
RETRY_AFTER_MS_KEY = "retry-after-ms"
"""Trailing metadata with the delay the server suggests (also sent as google.rpc.RetryInfo)."""

MODELS: dict[str, str | None] = {
    "macaron-auto": None,
    "macaron-chat": "chat",
    "macaron-agent": "agent",
    "macaron-code": "code",
    "macaron-ui": "ui",
}
"""Public model names → the specialist they force (None: the router decides)."""
