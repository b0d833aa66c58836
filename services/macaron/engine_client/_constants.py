"""Defaults of the engine client, in one place."""

from __future__ import annotations

from macaron import telemetry

DEFAULT_TIMEOUT_S = 600.0
"""Deadline of one call (all retries and the whole stream included), as openai-python's default."""
DEFAULT_CONNECT_TIMEOUT_S = 5.0
"""Longest wait for a TCP connection; a dead replica should fail fast and be retried."""
DEFAULT_MAX_RETRIES = 2
"""Retries of a request that no token has come back for yet (connect errors, 503, 429)."""
INITIAL_RETRY_DELAY_S = 0.25
MAX_RETRY_DELAY_S = 4.0
ABORT_TIMEOUT_S = 2.0
"""Deadline of the /abort_request call sent when a caller gives up on a request."""
DEADLINE_HEADER = telemetry.DEADLINE_HEADER
"""Sent with /generate: the seconds left of the call's deadline (the embedded engine stops the request then)."""
