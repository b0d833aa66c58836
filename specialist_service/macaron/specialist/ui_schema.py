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
import re
from importlib import resources
from typing import Any

import jsonschema

SCHEMA_FILE = "ui_schema.json"
KEY_SEPARATOR = ": "
ITEM_SEPARATOR = ", "
"""The separators the constrained grammar emits (xgrammar's compact JSON with spaces)."""


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
    root = schema or ui_schema()
    return _bound(root, root)


def _bound(node: dict[str, Any], root: dict[str, Any]) -> int:
    if "$ref" in node:
        return _bound(_resolve(node["$ref"], root), root)
    if "const" in node:
        return len(json.dumps(node["const"], ensure_ascii=False).encode())
    if "enum" in node:
        return max(len(json.dumps(v, ensure_ascii=False).encode()) for v in node["enum"])
    kind = node.get("type")
    if kind == "object":
        props = node.get("properties", {})
        if node.get("additionalProperties", True) is not False:
            raise ValueError("unbounded: an object must set additionalProperties to false")
        members = [len(json.dumps(k).encode()) + len(KEY_SEPARATOR) + _bound(v, root) for k, v in props.items()]
        return 2 + sum(members) + len(ITEM_SEPARATOR) * max(len(members) - 1, 0)
    if kind == "array":
        if "maxItems" not in node:
            raise ValueError("unbounded: an array must set maxItems")
        n = node["maxItems"]
        return 2 + n * _bound(node["items"], root) + len(ITEM_SEPARATOR) * max(n - 1, 0)
    if kind == "string":
        if "pattern" not in node:
            raise ValueError("unbounded: a string must have a bounding pattern")
        return 2 + _pattern_bytes(node["pattern"])
    raise ValueError(f"cannot bound schema node {node!r}")


def _resolve(ref: str, root: dict[str, Any]) -> dict[str, Any]:
    if not ref.startswith("#/"):
        raise ValueError(f"only local $refs are supported, got {ref!r}")
    node: Any = root
    for part in ref[2:].split("/"):
        node = node[part]
    return node


_ATOM = re.compile(r"(\[(?:\\.|[^\]])*\]|\\.|[^\[\\{])(?:\{(\d+)(?:,(\d+))?\})?")


def _pattern_bytes(pattern: str) -> int:
    """Longest match of an anchored pattern made of literals and classes with {m,n} repeats, in bytes."""
    if not (pattern.startswith("^") and pattern.endswith("$")):
        raise ValueError(f"pattern {pattern!r} must be anchored with ^ and $")
    body, total, pos = pattern[1:-1], 0, 0
    while pos < len(body):
        match = _ATOM.match(body, pos)
        if not match:
            raise ValueError(f"cannot bound pattern {pattern!r} at {body[pos:]!r}")
        atom, low, high = match.groups()
        total += _atom_bytes(atom) * int(high or low or 1)
        pos = match.end()
    return total


def _atom_bytes(atom: str) -> int:
    """UTF-8 length of the widest character an atom matches (a negated class: any code point)."""
    if atom.startswith("[^"):
        return 4
    highest = max([0x7F, *(int(h, 16) for h in re.findall(r"\\u([0-9a-fA-F]{4})", atom))])
    return len(chr(highest).encode())
