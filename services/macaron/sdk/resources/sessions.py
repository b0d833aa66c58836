"""`client.sessions`: `end` (Router.EndSession), the end of a conversation kept under a session id.

Why end one: the router counts a session as live on its replica until one to two spread windows after its
last turn, and places new sessions around the live ones; ending it counts it out at once, in every router,
and forgets its specialist and replica (the next turn with the same id starts afresh).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from macaron.v1 import router_pb2

if TYPE_CHECKING:
    from macaron.sdk._client import AsyncMacaronClient, MacaronClient


class Sessions:
    """Blocking sessions resource (`MacaronClient.sessions`)."""

    def __init__(self, client: MacaronClient) -> None:
        self._client = client

    def end(self, session_id: str, *, request_id: str | None = None, timeout: float | None = None,
            metadata: Mapping[str, str] | None = None) -> bool:
        """Ends the caller's session `session_id`; False when the key had no such session (never started,
        expired or ended already). A retry after a lost reply answers False, the session being gone."""
        c = self._client
        rid = c.new_request_id(request_id)
        deadline, extra = c._options(timeout, metadata)
        call_metadata = c.request_metadata(rid, extra)
        request = router_pb2.EndSessionRequest(session_id=session_id)
        reply = c._with_retries(
            lambda remaining: c._stub.EndSession(request, timeout=remaining, metadata=call_metadata),
            timeout=deadline, max_retries=c.max_retries, request_id=rid,
        )
        return bool(reply.ended)


class AsyncSessions:
    """asyncio sessions resource (`AsyncMacaronClient.sessions`)."""

    def __init__(self, client: AsyncMacaronClient) -> None:
        self._client = client

    async def end(self, session_id: str, *, request_id: str | None = None, timeout: float | None = None,
                  metadata: Mapping[str, str] | None = None) -> bool:
        """Ends the caller's session `session_id`; False when the key had no such session (never started,
        expired or ended already). A retry after a lost reply answers False, the session being gone."""
        c = self._client
        rid = c.new_request_id(request_id)
        deadline, extra = c._options(timeout, metadata)
        call_metadata = c.request_metadata(rid, extra)
        request = router_pb2.EndSessionRequest(session_id=session_id)

        async def attempt(remaining: float) -> Any:
            return await c._stub.EndSession(request, timeout=remaining, metadata=call_metadata)

        reply = await c._with_retries(attempt, timeout=deadline, max_retries=c.max_retries, request_id=rid)
        return bool(reply.ended)
