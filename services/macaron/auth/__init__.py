"""Authentication and per-key limits shared by the gateway and the router."""

from macaron.auth.guard import (
    AuthError,
    Guard,
    InsecureBindError,
    Lease,
    Principal,
    RateLimitedError,
    is_loopback,
    resolve_dev_mode,
)
from macaron.auth.internal import InternalTokenInterceptor, require_internal_token
from macaron.auth.keys import hash_api_key, new_api_key
from macaron.auth.settings import ApiKeyEntry, AuthSettings, ClientTlsSettings, ServerTlsSettings
from macaron.auth.tls import TlsConfigError

__all__ = [
    "ApiKeyEntry",
    "AuthError",
    "AuthSettings",
    "Guard",
    "InsecureBindError",
    "InternalTokenInterceptor",
    "Lease",
    "ClientTlsSettings",
    "ServerTlsSettings",
    "TlsConfigError",
    "require_internal_token",
    "Principal",
    "RateLimitedError",
    "hash_api_key",
    "is_loopback",
    "new_api_key",
    "resolve_dev_mode",
]
