"""Which version of the chosen specialist serves a request: pure functions, table-tested.

1. **session**: a session keeps the version it started with, as long as that version is still
   loaded (a session of a version rolled back or unloaded goes to stable: reason `retired`).
2. **canary**: a new session (or a request without one) takes the canary when the hash of its
   key falls under the canary's share; the hash is salted with the canary's name, so every
   router assigns the same session the same way and a new canary draws a fresh sample.
3. **stable** otherwise, and whenever the canary is not loaded on any replica yet
   (reason `canary_unavailable`): a request never waits for a version.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable, Literal

from macaron.lifecycle.versions import SpecialistState

VersionReason = Literal["stable", "canary", "session", "retired", "canary_unavailable"]


@dataclass(frozen=True, slots=True)
class VersionChoice:
    version: str
    reason: VersionReason
    canary: bool = False


def bucket(key: str, salt: str) -> float:
    """A uniform number in [0, 1) from the key (stable across processes and routers)."""
    digest = hashlib.sha256(f"{salt}\x00{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def choose_version(
    state: SpecialistState,
    *,
    session_version: str | None,
    key: str,
    available: Callable[[str], bool] = lambda v: True,
) -> VersionChoice:
    """The version for one request; `session_version` is the session's (None for a new session)."""
    if session_version is not None:
        if state.servable(session_version) and available(session_version):
            return VersionChoice(session_version, "session", session_version == state.canary)
        return VersionChoice(state.stable, "retired")
    if state.canary and state.canary_share > 0 and bucket(key, f"{state.specialist}@{state.canary}") < state.canary_share:
        if available(state.canary):
            return VersionChoice(state.canary, "canary", True)
        return VersionChoice(state.stable, "canary_unavailable")
    return VersionChoice(state.stable, "stable")
