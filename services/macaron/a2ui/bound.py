"""The longest JSON text a bounded JSON schema admits, in UTF-8 bytes, as the engine's grammar writes it.

Constrained decoding (xgrammar, `any_whitespace=False`) writes compact JSON with one space after
`:` and `,`. A schema is bounded when every object closes its properties, every array has
`maxItems` (or only `prefixItems`), and every string has an anchored pattern of literals and
classes with `{m,n}` repeats. Then any max_new_tokens at least this large completes every answer,
since a token is at least one byte. Unbounded nodes raise ValueError naming the node.
"""

from __future__ import annotations

import json
import re
from typing import Any

KEY_SEPARATOR = ": "
ITEM_SEPARATOR = ", "
"""The separators the constrained grammar emits (xgrammar's compact JSON with spaces)."""


def max_json_bytes(schema: dict[str, Any]) -> int:
    """Upper bound, in UTF-8 bytes, of any instance of `schema` in the grammar's formatting."""
    return _bound(schema, schema)


def _bound(node: dict[str, Any] | bool, root: dict[str, Any]) -> int:
    if node is True or node is False:
        raise ValueError("cannot bound a boolean schema")
    if "$ref" in node:
        return _bound(_resolve(node["$ref"], root), root)
    if "const" in node:
        return _json_bytes(node["const"])
    if "enum" in node:
        return max(_json_bytes(v) for v in node["enum"])
    for key in ("anyOf", "oneOf"):
        if key in node:
            return max(_bound(branch, root) for branch in node[key])
    kind = node.get("type")
    if kind == "object":
        if node.get("additionalProperties", True) is not False:
            raise ValueError("unbounded: an object must set additionalProperties to false")
        members = [_json_bytes(k) + len(KEY_SEPARATOR) + _bound(v, root) for k, v in node.get("properties", {}).items()]
        return 2 + sum(members) + len(ITEM_SEPARATOR) * max(len(members) - 1, 0)
    if kind == "array":
        return _array_bound(node, root)
    if kind == "string":
        if "pattern" not in node:
            raise ValueError("unbounded: a string must have a bounding pattern")
        return 2 + pattern_bytes(node["pattern"])
    if kind == "boolean":
        return len("false")
    raise ValueError(f"cannot bound schema node {node!r}")


def _array_bound(node: dict[str, Any], root: dict[str, Any]) -> int:
    prefix = [_bound(item, root) for item in node.get("prefixItems", [])]
    items = node.get("items", True)
    if items is False:
        sizes = prefix[: node.get("maxItems", len(prefix))]
    else:
        if "maxItems" not in node:
            raise ValueError("unbounded: an array must set maxItems")
        rest = node["maxItems"] - len(prefix)
        sizes = prefix[: node["maxItems"]] + [_bound(items, root)] * max(rest, 0)
    return 2 + sum(sizes) + len(ITEM_SEPARATOR) * max(len(sizes) - 1, 0)


def _json_bytes(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode())


def _resolve(ref: str, root: dict[str, Any]) -> dict[str, Any]:
    if not ref.startswith("#/"):
        raise ValueError(f"only local $refs are supported, got {ref!r}")
    node: Any = root
    for part in ref[2:].split("/"):
        node = node[part]
    return node


_ATOM = re.compile(r"(\[(?:\\.|[^\]])*\]|\\.|[^\[\\{])(?:\{(\d+)(?:,(\d+))?\})?")


def pattern_bytes(pattern: str) -> int:
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
