"""Adapter versions and one specialist's version state, as plain values (no store, no network).

A version is written `specialist@version` (`code@v3`). On the engine, each version is its own
adapter, named `adapter@version` (or just `adapter` for the unversioned one), so two versions sit
side by side on the same base weights and a request picks one with `lora_path`.

`SpecialistState` is what every router replica reads from the shared store: the stable version,
an optional canary with its share of new sessions, the versions loaded (with their paths, so a
replica that joins later can be given them), and the history of changes.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from macaron.ports import SPECIALISTS

VERSION_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MAX_HISTORY = 200
VersionStatus = Literal["loaded", "rolled_back"]


class VersionError(ValueError):
    """An operation the state does not allow (the message says why and what to do)."""


class InvalidRefError(VersionError):
    """Malformed input: a `specialist@version` or a share out of range."""


@dataclass(frozen=True, slots=True)
class VersionRef:
    """`specialist@version`; version "" is the unversioned adapter."""

    specialist: str
    version: str

    def __str__(self) -> str:
        return f"{self.specialist}@{self.version}" if self.version else self.specialist


def parse_ref(text: str, *, need_version: bool = True) -> VersionRef:
    """`code@v3` → VersionRef("code", "v3"); VersionError with what is expected otherwise."""
    name, sep, version = text.strip().partition("@")
    if name not in SPECIALISTS:
        raise InvalidRefError(f"{text!r}: the specialist must be one of {', '.join(SPECIALISTS)} (write NAME@VERSION)")
    if need_version and not sep:
        raise InvalidRefError(f"{text!r}: give a version, e.g. {name}@v2")
    if sep and not VERSION_PATTERN.match(version):
        raise InvalidRefError(f"{text!r}: a version is 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
    return VersionRef(name, version)


def engine_name(adapter: str, version: str) -> str:
    """The adapter's name on the engine (its `lora_path` in /generate)."""
    return f"{adapter}@{version}" if version else adapter


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One change: who did what to which version, when, and why."""

    at: float
    actor: str
    action: str
    version: str
    reason: str = ""
    detail: str = ""


@dataclass(frozen=True, slots=True)
class VersionInfo:
    path: str
    status: VersionStatus = "loaded"
    loaded_at: float = 0.0


@dataclass(frozen=True, slots=True)
class SpecialistState:
    """The versions of one specialist, as the shared store holds them."""

    specialist: str
    adapter: str
    stable: str
    canary: str = ""
    canary_share: float = 0.0
    versions: dict[str, VersionInfo] = field(default_factory=dict)
    revision: int = 0
    updated_at: float = 0.0

    @classmethod
    def initial(cls, specialist: str, adapter: str, version: str) -> SpecialistState:
        """Before any operation: the configured version is stable (its path is the engine's own)."""
        return cls(specialist, adapter, stable=version)

    def engine_name(self, version: str) -> str:
        return engine_name(self.adapter, version)

    def in_use(self) -> tuple[str, ...]:
        """Versions that may take new traffic: stable, then the canary."""
        return (self.stable, self.canary) if self.canary else (self.stable,)

    def servable(self, version: str) -> bool:
        """Whether a session pinned to `version` may still be served with it."""
        if version in self.in_use():
            return True
        info = self.versions.get(version)
        return info is not None and info.status == "loaded"

    def changed(self, **updates: Any) -> SpecialistState:
        return replace(self, revision=self.revision + 1, updated_at=time.time(), **updates)

    def to_json(self) -> bytes:
        body = asdict(self)
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes | str) -> SpecialistState:
        body = json.loads(raw)
        body["versions"] = {k: VersionInfo(**v) for k, v in (body.get("versions") or {}).items()}
        return cls(**body)


def history_to_json(entries: list[HistoryEntry]) -> bytes:
    return json.dumps([asdict(e) for e in entries[-MAX_HISTORY:]]).encode()


def history_from_json(raw: bytes | None) -> list[HistoryEntry]:
    if not raw:
        return []
    try:
        return [HistoryEntry(**e) for e in json.loads(raw)]
    except (ValueError, TypeError):
        return []
