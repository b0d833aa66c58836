"""The bounded sub-schema of A2UI v0.9 that constrained decoding follows, derived from the pruned catalog.

The protocol's own schemas cannot drive a grammar that must finish: components reference each
other by id in an unbounded list, strings and arrays have no limits, and the catalog's `allOf` /
`unevaluatedProperties` layering is beyond what grammar compilers take. So the `ui` grammar is a
finite sub-language, built from the catalog the SDK pruned (`catalog.py`):

    [{"version": "v0.9", "createSurface": {"surfaceId": "main", "catalogId": <basic catalog>}},
     {"version": "v0.9", "updateComponents": {"surfaceId": "main", "components": [
         {"id": "root", "component": "Column", "children": ["title", ...]}, ...]}}]

- the first component is the root, always a Column with id "root"; then up to
  `max_components - 1` components of the kept kinds (one JSON-schema branch per component);
- per component, its required properties plus a few optional presentation enums (`OPTIONAL`),
  each mapped from the catalog's own property schema: a component id → an identifier pattern,
  a child list → an array of ids (`max_children`), a dynamic string → a literal text (pattern
  of `max_text_chars` printable characters, no quote or backslash), a dynamic boolean → a literal,
  an enum → the catalog's enum, an action → `{"event": {"name": <identifier>}}`. A property
  shape the mapping does not know raises ValueError, so a catalog change cannot silently widen it.

What the grammar cannot say (every child id names a component, every component is reachable
from the root, ids are unique) is checked by the SDK's validator before an answer is returned
(`validate.py`). `max_output_bytes()` is the grammar's longest answer; see `settings.py`.
"""

from __future__ import annotations

import functools
from typing import Any

from macaron.a2ui.bound import max_json_bytes
from macaron.a2ui.catalog import PROTOCOL_VERSION, SURFACE_ID, catalog_id, pruned_catalog
from macaron.a2ui.settings import A2uiSettings

ROOT_ID = "root"
ROOT_COMPONENT = "Column"
OPTIONAL: dict[str, tuple[str, ...]] = {
    "Text": ("variant",),
    "Button": ("variant",),
    "TextField": ("variant",),
}
"""Optional properties the grammar offers besides each component's required ones."""

TEXT_CLASS = r"[ !#-\[\]-~\u00a0-\ud7ff\ue000-\uffff]"
"""Printable characters of the Basic Multilingual Plane but quote and backslash (a positive class:
with a negated one xgrammar 0.2.9 lets invalid UTF-8 through; a pattern, not maxLength, because
xgrammar 0.2.9 lets control characters through maxLength strings)."""


def _text(chars: int) -> dict[str, Any]:
    return {"type": "string", "pattern": f"^{TEXT_CLASS}{{0,{chars}}}$"}


def _ident(chars: int) -> dict[str, Any]:
    return {"type": "string", "pattern": f"^[a-z][a-z0-9_]{{0,{chars - 1}}}$"}


def a2ui_schema(settings: A2uiSettings | None = None) -> dict[str, Any]:
    """The bounded JSON schema of one `ui` answer (a list of A2UI messages) for `settings` (cached and shared:
    read it, do not change it)."""
    s = settings or A2uiSettings()
    return _schema(tuple(s.components), s.max_components, s.max_children, s.max_text_chars, s.max_id_chars)


def max_output_bytes(settings: A2uiSettings | None = None) -> int:
    """The longest answer the grammar admits, in UTF-8 bytes: a budget this large always completes it."""
    return max_json_bytes(a2ui_schema(settings))


@functools.cache
def _schema(components: tuple[str, ...], max_components: int, max_children: int, text: int, ident: int) -> dict[str, Any]:
    if ROOT_COMPONENT not in components:
        raise ValueError(f"specialists.a2ui.components must keep {ROOT_COMPONENT}: the root is a {ROOT_COMPONENT}")
    catalog = pruned_catalog(components)
    defs: dict[str, Any] = {"text": _text(text), "ident": _ident(ident)}
    for name in catalog.components:
        defs[name] = _component(name, catalog.resolved_component_schema(name), max_children)
    root = _component(ROOT_COMPONENT, catalog.resolved_component_schema(ROOT_COMPONENT), max_children)
    root["properties"]["id"] = {"const": ROOT_ID}
    defs["root"] = root
    update = {
        "type": "array",
        "prefixItems": [{"$ref": "#/$defs/root"}],
        "items": {"anyOf": [{"$ref": f"#/$defs/{name}"} for name in catalog.components]},
        "minItems": 2,
        "maxItems": max_components,
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Macaron ui answer: A2UI v0.9 messages, bounded",
        "type": "array",
        "prefixItems": [
            _message("createSurface", {"surfaceId": {"const": SURFACE_ID}, "catalogId": {"const": catalog_id()}}),
            _message("updateComponents", {"surfaceId": {"const": SURFACE_ID}, "components": update}),
        ],
        "items": False,
        "minItems": 2,
        "maxItems": 2,
        "$defs": defs,
    }


def _message(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "version": {"const": PROTOCOL_VERSION},
            kind: {"type": "object", "properties": body, "required": list(body), "additionalProperties": False},
        },
        "required": ["version", kind],
        "additionalProperties": False,
    }


def _component(name: str, schema: dict[str, Any], max_children: int) -> dict[str, Any]:
    """One component's bounded schema: id, component, then its required and OPTIONAL properties."""
    props = schema["properties"]
    required = [p for p in schema.get("required", []) if p not in ("id", "component")]
    kept = required + [p for p in OPTIONAL.get(name, ()) if p in props and p not in required]
    properties: dict[str, Any] = {"id": {"$ref": "#/$defs/ident"}, "component": {"const": name}}
    for prop in kept:
        properties[prop] = _property(name, prop, props[prop], max_children)
    return {
        "type": "object",
        "properties": properties,
        "required": ["id", "component", *required],
        "additionalProperties": False,
    }


def _property(component: str, prop: str, schema: dict[str, Any], max_children: int) -> dict[str, Any]:
    """The bounded form of one catalog property (see the module docstring for the mapping)."""
    ref = schema.get("$ref", "")
    branches = schema.get("anyOf", [])
    types = {b.get("type") for b in branches if isinstance(b, dict)}
    enums = [b["enum"] for b in branches if isinstance(b, dict) and "enum" in b] or ([schema["enum"]] if "enum" in schema else [])
    if ref.endswith("/ComponentId"):
        return {"$ref": "#/$defs/ident"}
    if ref.endswith("/ChildList"):
        return {"type": "array", "items": {"$ref": "#/$defs/ident"}, "minItems": 1, "maxItems": max_children}
    if ref.endswith("/Action"):
        event = {"type": "object", "properties": {"name": {"$ref": "#/$defs/ident"}}, "required": ["name"],
                 "additionalProperties": False}
        return {"type": "object", "properties": {"event": event}, "required": ["event"], "additionalProperties": False}
    if enums:
        return {"enum": list(enums[0])}
    if "string" in types:
        return {"$ref": "#/$defs/text"}
    if "boolean" in types:
        return {"type": "boolean"}
    raise ValueError(f"the ui grammar cannot bound {component}.{prop}; keep another component or extend macaron.a2ui.grammar")
