"""Sessions in the shared store: per (API key owner, session id), the last specialist, adapter version and replica.

One Redis hash per session, `session:<sha256(owner, session id)>`, rewritten on every routed
turn with the TTL reset (sliding expiry), so an idle conversation is forgotten after
`session_ttl_s`. Owners namespace sessions: two keys using the same session id never share one.
Reads and writes raise StoreUnavailableError; the caller routes without a session then.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from macaron.ports import SPECIALISTS
from macaron.router.decision import SessionView
from macaron.store import Store

MAX_SESSION_ID_LENGTH = 256


def session_key(owner: str, session_id: str) -> str:
    """The store key of one session (hashed: ids are caller-controlled text)."""
    digest = hashlib.sha256(f"{owner}\x00{session_id}".encode()).hexdigest()[:40]
    return f"session:{digest}"


def encode(view: SessionView) -> dict[str, bytes]:
    return {
        "specialist": view.specialist.encode(),
        "adapter_version": view.adapter_version.encode(),
        "replica": view.replica.encode(),
        "turns": str(view.turns).encode(),
    }


def decode(fields: dict[str, bytes]) -> SessionView | None:
    """The session a hash holds, or None when it is missing or not ours."""
    specialist = fields.get("specialist", b"").decode(errors="replace")
    if specialist not in SPECIALISTS:
        return None
    try:
        turns = int(fields.get("turns", b"0"))
    except ValueError:
        turns = 0
    return SessionView(
        specialist=specialist,
        adapter_version=fields.get("adapter_version", b"").decode(errors="replace"),
        replica=fields.get("replica", b"").decode(errors="replace"),
        turns=turns,
    )


@dataclass
class SessionStore:
    """get/put of sessions through the (gated) shared store."""

    store: Store
    ttl_s: float

    async def get(self, owner: str, session_id: str) -> SessionView | None:
        (fields,) = await self.store.hgetall_many([session_key(owner, session_id)])
        return decode(fields)

    async def put(self, owner: str, session_id: str, view: SessionView) -> None:
        await self.store.hset(session_key(owner, session_id), encode(view), self.ttl_s)

    async def delete(self, owner: str, session_id: str) -> bool:
        """Forgets a session; whether there was one to forget."""
        key = session_key(owner, session_id)
        (fields,) = await self.store.hgetall_many([key])
        await self.store.delete(key)
        return decode(fields) is not None
