"""Creating and hashing API keys."""

from __future__ import annotations

import hashlib
import secrets

KEY_PREFIX = "mk-"


def new_api_key() -> str:
    """A fresh random key (`mk-` + 43 URL-safe characters, 256 bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_api_key(key: str) -> str:
    """The hex SHA-256 stored in configuration instead of the key."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()
