"""API keys and their limits, as configured (keys are stored as SHA-256 hashes, never in plain)."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


class ApiKeyEntry(BaseModel):
    """One API key: who it belongs to, its hash and its limits."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Owner of the key (logged and used to namespace sessions), e.g. a team or app.")
    sha256: str = Field(description="Hex SHA-256 of the key; `macaron keys create` prints a new key and its hash.")
    requests_per_minute: int | None = Field(
        None, description="Requests this key may make per minute over all replicas (default: auth.default_requests_per_minute)."
    )

    @field_validator("sha256")
    @classmethod
    def _is_hash(cls, value: str) -> str:
        value = value.strip().lower()
        if not _SHA256_HEX.match(value):
            raise ValueError("sha256 must be 64 hex characters (the hash of the key, never the key itself)")
        return value


class AuthSettings(BaseModel):
    """Authentication and per-key limits, shared by the gateway and the router."""

    model_config = ConfigDict(extra="forbid")

    api_keys: list[ApiKeyEntry] = Field(default_factory=list, description="Accepted API keys (hashes).")
    dev_mode: bool | None = Field(
        None,
        description="Serve without keys. Default (null): on when no keys are configured and the service binds "
        "to loopback only; refused for any other address.",
    )
    default_requests_per_minute: int = Field(600, description="Per-key request limit when a key sets none.")
    dev_requests_per_minute: int = Field(6000, description="Request limit for the anonymous dev-mode caller.")
