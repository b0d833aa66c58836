"""A2UI v0.9 for the `ui` specialist: the basic catalog (pruned by the official SDK), the bounded
grammar derived from it, its byte bound, pruning of strays, and validation with the SDK.

Importing the package stays light (the configuration imports `settings.py`); the names below
load the `a2ui` SDK on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "PROTOCOL_VERSION": "catalog",
    "SURFACE_ID": "catalog",
    "basic_catalog": "catalog",
    "catalog_id": "catalog",
    "pruned_catalog": "catalog",
    "a2ui_schema": "grammar",
    "max_output_bytes": "grammar",
    "A2uiSettings": "settings",
    "A2uiOutputError": "validate",
    "validate_a2ui": "validate",
    "prune_components": "repair",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'macaron.a2ui' has no attribute {name!r}")
    return getattr(importlib.import_module(f"macaron.a2ui.{_EXPORTS[name]}"), name)
