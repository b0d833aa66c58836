"""Check a `ui` answer the way a renderer holding the basic catalog would, with the official SDK.

The answer is a JSON array of A2UI v0.9 server-to-client messages. The SDK's `validate_payload`
checks each message against the protocol, every component against the catalog, and the surface's
integrity (a root, every reference resolved, nothing orphaned). The full basic catalog is used,
not the grammar's pruned one: an answer is valid for any basic-catalog renderer, whether the
grammar, an unconstrained adapter or a client wrote it.
"""

from __future__ import annotations

import json
from typing import Any

from a2ui.core import A2uiError
from a2ui.utils.validation import validate_payload

from macaron.a2ui.catalog import basic_catalog
from macaron.a2ui.repair import prune_components


class A2uiOutputError(ValueError):
    """An answer that is not valid A2UI; the message says where and why."""


def validate_a2ui(text: str, *, prune: bool = False) -> list[dict[str, Any]]:
    """The parsed messages; raises A2uiOutputError if `text` is not a valid A2UI v0.9 message list.

    With `prune`, components beyond the root's tree are dropped first (`repair.py`) and the pruned
    messages are what is validated and returned."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise A2uiOutputError(f"the A2UI answer is not valid JSON: {exc}") from None
    if not isinstance(value, list) or not value:
        raise A2uiOutputError("the A2UI answer must be a non-empty JSON array of A2UI v0.9 messages")
    if prune:
        value = prune_components(value)
    try:
        validate_payload([basic_catalog()], value)
    except A2uiError as exc:
        raise A2uiOutputError(f"the A2UI answer is not valid A2UI v0.9 (basic catalog): {exc}") from None
    return value
