"""A2UI v0.9 for the `ui` specialist: the basic catalog (pruned by the official SDK), the bounded
grammar derived from it, its byte bound, and validation with the SDK.

`settings.py` stays light (the configuration imports it); the rest imports the `a2ui` SDK.
"""

from macaron.a2ui.catalog import PROTOCOL_VERSION, SURFACE_ID, basic_catalog, catalog_id, pruned_catalog
from macaron.a2ui.grammar import a2ui_schema, max_output_bytes
from macaron.a2ui.settings import A2uiSettings
from macaron.a2ui.validate import A2uiOutputError, validate_a2ui

__all__ = [
    "PROTOCOL_VERSION",
    "SURFACE_ID",
    "A2uiOutputError",
    "A2uiSettings",
    "a2ui_schema",
    "basic_catalog",
    "catalog_id",
    "max_output_bytes",
    "pruned_catalog",
    "validate_a2ui",
]
