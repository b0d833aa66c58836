"""Tool calls streamed as they are generated, in OpenAI's delta shape.

For formats that wrap one JSON call object between tags (Hermes/Qwen2.5:
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`), `CallStreamer` reads the growing
output and yields, in order: content text that can no longer be part of a call; for each call,
a first delta with index, id and name (arguments "") once the name is complete and names an
offered tool; then fragments of the arguments' JSON text as they arrive, up to the brace that
closes the arguments object. As OpenAI documents, the arguments are the model's own text and
are not guaranteed to satisfy the schema (forced calls are, by constrained decoding). A block
that names no offered tool, or is not a call at all, stays content.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from macaron.prompting import ToolSpec
from macaron.specialist.events import Event, TextDelta, ToolCallDelta, ToolCallDeltas
from macaron.specialist.tool_parsers import new_call_id

_NAME = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_ARGUMENTS = re.compile(r'"(?:arguments|parameters)"\s*:\s*')


@dataclass
class _Call:
    tag_at: int
    """Where the opening tag starts (the block is content again if it never becomes a call)."""
    body_at: int
    """Where the JSON object starts."""
    index: int = -1
    """OpenAI's index once announced, else -1."""
    sent: int = 0
    """Characters of the arguments text already streamed."""
    string_arguments: bool = False
    """The model wrote the arguments as a JSON string: sent whole, decoded, when the block ends."""


@dataclass
class CallStreamer:
    """Splits one answer's growing text into content and tool-call deltas (see the module doc)."""

    start: str
    end: str
    tools: tuple[ToolSpec, ...]
    in_call: bool = False
    """True for a forced call: the prompt already opened the block, the output is the JSON object."""
    calls: int = 0
    """How many calls were announced."""
    _pos: int = 0
    _call: _Call | None = None
    _held: str = ""
    _names: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        self._names = frozenset(t.name for t in self.tools)
        if self.in_call:
            self._call = _Call(tag_at=0, body_at=0)

    def feed(self, text: str) -> list[Event]:
        """Events for what `text` (everything generated so far) adds."""
        return self._advance(text, final=False)

    def finish(self, text: str, *, cut: bool) -> list[Event]:
        """The last events. `cut`: max_tokens ended the output, so an open call keeps what fit;
        otherwise an open call ended at a stop (its closing tag trimmed) and is complete."""
        events = self._advance(text, final=True)
        call = self._call
        if call is not None:
            body = text[call.body_at:]
            if call.index < 0 and self.in_call:
                # a forced call cut before its name: the only function it can be, or no name at all
                events += self._announce(call, self.tools[0].name if len(self.tools) == 1 else "")
            if call.index >= 0:
                events += self._arguments(call, body, closed=not cut)
            else:
                events += self._content(text[call.tag_at:], final=True)
            self._call = None
        if self._held and not self.calls:
            events.append(TextDelta(self._held))
        self._held = ""
        return events

    # ------------------------------------------------------------ internals

    def _advance(self, text: str, final: bool) -> list[Event]:
        events: list[Event] = []
        while True:
            if self._call is None:
                found = text.find(self.start, self._pos)
                if found < 0:
                    safe = len(text) if final else _safe_end(text, self._pos, self.start)
                    events += self._content(text[self._pos:safe], final=False)
                    self._pos = safe
                    return events
                events += self._content(text[self._pos:found], final=False)
                self._call = _Call(tag_at=found, body_at=found + len(self.start))
                self._pos = self._call.body_at
            call = self._call
            closing = text.find(self.end, call.body_at)
            body = text[call.body_at:] if closing < 0 else text[call.body_at:closing]
            if call.index < 0:
                named = _NAME.search(body)
                if named and _unescape(named.group(1)) in self._names:
                    events += self._announce(call, _unescape(named.group(1)))
            if call.index >= 0:
                events += self._arguments(call, body, closed=closing >= 0)
            if closing < 0:
                return events
            if call.index < 0:  # a closed block that is no call of an offered tool: content
                events += self._content(text[call.tag_at:closing + len(self.end)], final=False)
            self._pos = closing + len(self.end)
            self._call = None

    def _announce(self, call: _Call, name: str) -> list[Event]:
        call.index = self.calls
        self.calls += 1
        self._held = ""  # whitespace between content and a call is not content
        return [ToolCallDeltas((ToolCallDelta(call.index, new_call_id(), name, ""),))]

    def _arguments(self, call: _Call, body: str, *, closed: bool) -> list[Event]:
        """The arguments text not yet sent; `closed`: the block ended, so finish the call."""
        found = _ARGUMENTS.search(body)
        fragment = ""
        if found is not None:
            at = found.end()
            if body[at:at + 1] == '"':
                call.string_arguments = True
            if call.string_arguments:
                if closed:
                    fragment = _decoded_string(body[at:]) if call.sent == 0 else ""
                    call.sent = 1
            elif body[at:at + 1] == "{":
                stop = _object_end(body, at)
                value = body[at:len(body) if stop is None else stop]
                fragment, call.sent = value[call.sent:], len(value)
        elif closed and call.sent == 0:
            fragment, call.sent = "{}", 2  # a call without arguments
        return [ToolCallDeltas((ToolCallDelta(call.index, arguments=fragment),))] if fragment else []

    def _content(self, text: str, final: bool) -> list[Event]:
        """Content text; after a call, whitespace alone is held until real text follows it."""
        if not text:
            return []
        if self.calls and not (self._held + text).strip():
            self._held += text
            return []
        text, self._held = self._held + text, ""
        return [TextDelta(text)]


def _safe_end(text: str, pos: int, tag: str) -> int:
    """How far content may be sent: all but a tail that could still grow into `tag`."""
    for keep in range(min(len(tag) - 1, len(text) - pos), 0, -1):
        if tag.startswith(text[-keep:]):
            return len(text) - keep
    return len(text)


def _object_end(text: str, at: int) -> int | None:
    """Index just past the JSON object that opens at `at`, or None while it is still open."""
    depth, in_string, escaped = 0, False, False
    for i in range(at, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def _unescape(name: str) -> str:
    try:
        return str(json.loads(f'"{name}"'))
    except json.JSONDecodeError:
        return name


def _decoded_string(text: str) -> str:
    """Arguments a model wrote as a JSON string: the string's content (itself JSON text)."""
    try:
        value, _ = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError:
        return ""
    return value if isinstance(value, str) else json.dumps(value)
