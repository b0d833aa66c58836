"""API keys and their limits, as configured (keys are stored as SHA-256 hashes, never in plain)."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


class ApiKeyEntry(BaseModel):
    """One API key: who it belongs to, its hash and its limits."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Owner of the key (logged and used to namespace sessions), e.g. a team or app.")
    sha256: str = Field(description="Hex SHA-256 of the key; `macaron keys create` prints a new key and its hash.")
    requests_per_minute: int | None = Field(
        None, description="Requests this key may make per minute over all replicas (default: auth.default_requests_per_minute)."
    )
    max_concurrent_requests: int | None = Field(
        None, ge=1, description="Requests of this key in flight at once over all routers (default: "
        "auth.default_max_concurrent_requests); one more is RESOURCE_EXHAUSTED / 429.",
    )
    tokens_per_minute: int | None = Field(
        None, ge=1, description="Prompt plus completion tokens this key may use per clock minute over all routers "
        "(default: auth.default_tokens_per_minute); once spent, new requests wait for the next minute (429).",
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
    default_max_concurrent_requests: int | None = Field(
        None, ge=1, description="Per-key limit of requests in flight when a key sets none (null: unlimited)."
    )
    default_tokens_per_minute: int | None = Field(
        None, ge=1, description="Per-key token budget per minute when a key sets none (null: unlimited)."
    )
    rate_credit: int = Field(
        8, ge=1, description="A key with only a request-rate limit (no token budget, no concurrency cap) takes this "
        "many admissions of its window from the shared store at once, and admits locally until they are spent: most "
        "requests need no admission round trip. Trade-off: credit taken is counted in the window when taken, so near "
        "the limit each router replica may admit up to this many requests more over a sliding window than the "
        "limit. 1: every request asks the store.",
    )
    rate_credit_ttl_s: float = Field(
        60.0, gt=0, description="Unspent rate credit expires after this long (at most the one-minute window it was "
        "counted in).",
    )
    internal_token: SecretStr | None = Field(
        None,
        description="Shared secret between Macaron's own hops (the router sends it to the specialists as a bearer "
        "token; they refuse calls without it). Required by every service bound to a non-loopback address; set it "
        "from a Secret (MACARON_AUTH__INTERNAL_TOKEN), never in a committed file.",
    )

    @property
    def internal_token_value(self) -> str | None:
        """The internal token in plain text (None when unset or empty)."""
        return self.internal_token.get_secret_value() or None if self.internal_token is not None else None


class ServerTlsSettings(BaseModel):
    """TLS of one gRPC server; off while cert_file is empty."""

    model_config = ConfigDict(extra="forbid")

    cert_file: str | None = Field(None, description="PEM certificate chain the server presents (tls.crt); empty: no TLS.")
    key_file: str | None = Field(None, description="PEM private key of cert_file (tls.key).")
    client_ca_file: str | None = Field(
        None, description="PEM CA bundle (ca.crt); set: clients must present a certificate it signed (mutual TLS)."
    )

    @model_validator(mode="after")
    def _pair(self) -> ServerTlsSettings:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("set both cert_file and key_file (or neither)")
        if self.client_ca_file and not self.cert_file:
            raise ValueError("client_ca_file needs cert_file and key_file: mutual TLS is TLS first")
        return self

    @property
    def enabled(self) -> bool:
        return bool(self.cert_file)


class ClientTlsSettings(BaseModel):
    """TLS of one gRPC client; off unless `enabled` or a file is set."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(False, description="Use TLS (system roots unless ca_file is set).")
    ca_file: str | None = Field(None, description="PEM CA bundle that signed the server's certificate (ca.crt).")
    cert_file: str | None = Field(None, description="PEM client certificate, for servers that require mutual TLS.")
    key_file: str | None = Field(None, description="PEM private key of cert_file.")
    server_name: str | None = Field(
        None, description="Name to check the server's certificate against, when it differs from the target's host."
    )

    @property
    def on(self) -> bool:
        return self.enabled or bool(self.ca_file or self.cert_file)
