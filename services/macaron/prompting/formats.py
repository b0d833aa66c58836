"""Response formats a client may ask for by name alone, without sending a schema.

`{"type": "json_schema", "json_schema": {"name": "macaron_ui_v1"}}` asks the `ui` specialist
for the project's own UI description (the schema it spoke before A2UI), and `a2ui_v0_9` for A2UI
v0.9 messages (its default). The specialist fills in the schema, constrains decoding to it and
validates the answer before returning it. Any other name needs its schema, as in OpenAI's API.
"""

from __future__ import annotations

NAMED_FORMATS: dict[str, str] = {
    "macaron_ui_v1": "the project's UI description v1 (a tree of typed components; before A2UI)",
    "a2ui_v0_9": "A2UI v0.9 server-to-client messages over the basic catalog (the ui specialist's default)",
}


def is_named_format(name: str | None) -> bool:
    """True when `name` is a format the specialists know without a schema."""
    return bool(name) and name in NAMED_FORMATS


def named_formats_hint() -> str:
    """The names, for error messages."""
    return ", ".join(NAMED_FORMATS)
