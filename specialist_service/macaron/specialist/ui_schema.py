"""The generative-UI contract of the L3 `ui` specialist: a JSON schema, its validator, its size bound.

A UI description (`ui_schema.json`, version v1) is a tree of components:

    {"title": "Book a table",
     "root": {"type": "column", "children": [
        {"type": "heading", "props": {"text": "Book a table"}},
        {"type": "input", "props": {"id": "guests", "text": "Guests"}},
        {"type": "button", "props": {"text": "Book", "variant": "primary"},
         "actions": [{"event": "click", "call": "book_table"}]}]}}

- `type`: one of twelve enumerated components (containers column, row, card, list; content
  text, heading, image, divider; inputs button, input, checkbox, select). Only `type` is required.
- `props`: optional `id` (identifier), `text` (visible text), `variant` (primary, secondary,
  danger, muted).
- `actions`: what the app calls when an event (click, submit, change) fires; `call` names the
  app's handler.
- `children`: sub-components; the root is depth 1 and depth 3 components are leaves.

Why it is shaped like this: constrained decoding (engine `json_schema`) must always finish, so
the language is finite. Depth is limited by one definition per level (`node1`..`node3`, no
recursion), arrays have `maxItems`, choices are enums, and strings are bounded by their
*pattern* (`{0,32}`) rather than `maxLength` (xgrammar 0.2.9 lets control characters through
`maxLength` strings; a pattern excludes them). Text is a *positive* class (printable characters
of the Basic Multilingual Plane but quote and backslash): with a negated class xgrammar 0.2.9
lets invalid UTF-8 byte sequences through. `max_output_bytes()` computes the longest
possible description under the engine's compact JSON formatting; any `max_new_tokens` at least
that large guarantees a complete description, since a token is at least one byte. Every
output is validated with `jsonschema` before it is returned, whatever the engine did.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

import jsonschema

from macaron.a2ui.bound import max_json_bytes

SCHEMA_FILE = "ui_schema.json"


class UIValidationError(ValueError):
    """Output that is not a valid UI description; the message says where and why."""


@functools.cache
def ui_schema() -> dict[str, Any]:
    """The UI description schema (v1), as a dict."""
    text = resources.files("macaron.specialist").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    return json.loads(text)


def ui_schema_json() -> str:
    """The schema as compact JSON text (what the engine's `json_schema` receives)."""
    return json.dumps(ui_schema(), separators=(",", ":"))


@functools.cache
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(ui_schema())


def validate_ui(text: str) -> dict[str, Any]:
    """The parsed description; raises UIValidationError if `text` is not valid JSON or not valid UI."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UIValidationError(f"UI output is not valid JSON: {exc}") from None
    error = jsonschema.exceptions.best_match(_validator().iter_errors(value))
    if error is not None:
        path = "/".join(str(p) for p in error.absolute_path) or "(root)"
        raise UIValidationError(f"UI output does not match the UI schema at {path}: {error.message}")
    return value


def max_output_bytes(schema: dict[str, Any] | None = None) -> int:
    """Upper bound, in UTF-8 bytes, of any valid description in the grammar's compact formatting."""
    return max_json_bytes(schema or ui_schema())
