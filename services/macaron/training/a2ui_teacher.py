"""The `ui` teacher: A2UI skeletons whose structure is fixed and whose words the teacher writes.

A 135 M-parameter teacher cannot keep A2UI's id references straight over a flat component list:
free, it repeats components until the budget runs out or names children it never defines; shown
an example, it copies it verbatim; writing texts inside the JSON, it copies the neighbouring ids.
So each prompt gets one of five interface skeletons (a form, a checklist, a card, a toolbar, a
search page; chosen by a hash of the prompt), and the teacher answers a small JSON object of
named slots (`{"page_title": ..., "first_field": ..., "button": ..., "action": ...}`), constrained
by a schema. The target is the skeleton's A2UI messages with the slots filled in: valid A2UI by
construction (the SDK still checks every target), with the teacher's words for the request, in
several shapes. Served answers use the general bounded grammar (`macaron.a2ui.grammar`).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

from macaron.a2ui.catalog import PROTOCOL_VERSION, SURFACE_ID, catalog_id
from macaron.a2ui.grammar import TEXT_CLASS


@dataclass(frozen=True)
class Slot:
    """A word the teacher writes: a text (2 to 32 characters) or an action name (snake_case)."""

    name: str
    kind: str = "text"


def _button(node_id: str, label: str, action: str = "action") -> list[dict[str, Any]]:
    return [
        {"id": node_id, "component": "Button", "child": f"{node_id}_label",
         "action": {"event": {"name": Slot(action, "name")}}, "variant": "primary"},
        {"id": f"{node_id}_label", "component": "Text", "text": Slot(label)},
    ]


TITLE = {"id": "title", "component": "Text", "text": Slot("page_title"), "variant": "h2"}

SKELETONS: dict[str, list[dict[str, Any]]] = {
    "form": [
        {"id": "root", "component": "Column", "children": ["title", "first", "second", "submit"]},
        TITLE,
        {"id": "first", "component": "TextField", "label": Slot("first_field")},
        {"id": "second", "component": "TextField", "label": Slot("second_field")},
        *_button("submit", "button"),
    ],
    "checklist": [
        {"id": "root", "component": "Column", "children": ["title", "one", "two", "three", "save"]},
        TITLE,
        {"id": "one", "component": "CheckBox", "label": Slot("first_option"), "value": False},
        {"id": "two", "component": "CheckBox", "label": Slot("second_option"), "value": False},
        {"id": "three", "component": "CheckBox", "label": Slot("third_option"), "value": False},
        *_button("save", "button"),
    ],
    "card": [
        {"id": "root", "component": "Column", "children": ["title", "card"]},
        TITLE,
        {"id": "card", "component": "Card", "child": "body"},
        {"id": "body", "component": "Column", "children": ["summary", "open"]},
        {"id": "summary", "component": "Text", "text": Slot("summary")},
        *_button("open", "button"),
    ],
    "toolbar": [
        {"id": "root", "component": "Column", "children": ["title", "intro", "divider", "actions"]},
        TITLE,
        {"id": "intro", "component": "Text", "text": Slot("introduction")},
        {"id": "divider", "component": "Divider"},
        {"id": "actions", "component": "Row", "children": ["main", "other"]},
        *_button("main", "first_button", "first_action"),
        *_button("other", "second_button", "second_action"),
    ],
    "search": [
        {"id": "root", "component": "Column", "children": ["title", "query", "search", "results"]},
        TITLE,
        {"id": "query", "component": "TextField", "label": Slot("search_field")},
        *_button("search", "button"),
        {"id": "results", "component": "Text", "text": Slot("results_hint"), "variant": "caption"},
    ],
}

DESCRIPTIONS: dict[str, str] = {
    "form": "a form: its title, the labels of its two input fields, its button's label and the button's action",
    "checklist": "a checklist: its title, three options to tick, its button's label and the button's action",
    "card": "a card: its title, a one-sentence summary, its button's label and the button's action",
    "toolbar": "a page with a title, a one-sentence introduction and two buttons (labels and actions)",
    "search": "a search page: its title, the search field's label, the button's label and action, a hint for the results",
}


def skeleton_for(prompt: str) -> str:
    """The skeleton of a prompt (a stable hash of its text: every shape is trained, reruns agree)."""
    return list(SKELETONS)[zlib.crc32(prompt.encode()) % len(SKELETONS)]


def slots(skeleton: str) -> list[Slot]:
    """The skeleton's slots in order of first appearance."""
    found: dict[str, Slot] = {}

    def walk(value: Any) -> None:
        if isinstance(value, Slot):
            found.setdefault(value.name, value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)

    for component in SKELETONS[skeleton]:
        walk(component)
    return list(found.values())


def teacher_schema(skeleton: str) -> dict[str, Any]:
    """The teacher's answer: one object with the skeleton's slots, every one required."""
    patterns = {"text": f"^{TEXT_CLASS}{{2,32}}$", "name": "^[a-z][a-z_]{2,23}$"}
    properties = {s.name: {"type": "string", "pattern": patterns[s.kind]} for s in slots(skeleton)}
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def fill(skeleton: str, words: dict[str, str]) -> list[dict[str, Any]]:
    """The skeleton's A2UI messages with every slot replaced by the teacher's word for it."""
    def resolve(value: Any) -> Any:
        if isinstance(value, Slot):
            return words[value.name].strip()
        return {k: resolve(v) for k, v in value.items()} if isinstance(value, dict) else value

    return [
        {"version": PROTOCOL_VERSION, "createSurface": {"surfaceId": SURFACE_ID, "catalogId": catalog_id()}},
        {"version": PROTOCOL_VERSION, "updateComponents": {
            "surfaceId": SURFACE_ID, "components": [resolve(c) for c in SKELETONS[skeleton]]}},
    ]
