"""Tool-call parsers: model output text ↔ structured tool calls, one parser per output format.

Pluggable: a parser is any object with the `ToolCallParser` shape, registered by name with
`register_parser(name, factory)`; a profile names its parser (`tool_call_parser: hermes`).
The built-in `hermes` parser reads the Hermes/Qwen2.5 format the chat template renders:

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

A parser also tells the specialist how to *force* a call: `call_prefix` is appended to the
prompt (the renderer does it), and `forced_call_schema(tools)` is the JSON schema the engine
constrains the rest of the output to, so a forced answer is always one well-formed call whose
arguments satisfy the function's schema. In `auto` mode, text between calls stays content;
a block that is not valid JSON, names an unknown tool, or has arguments that fail the
function's schema is kept as text, not returned as a call (`parse`, for whole outputs such as
the training data's). Served answers are streamed instead: `tool_stream.CallStreamer` reads the
output between the parser's `start` and `end` tags as it grows and sends OpenAI's deltas.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import jsonschema

from macaron.prompting import ToolSpec


@dataclass(frozen=True, slots=True)
class ParsedToolCall:
    """One call found in the output; `arguments` is JSON text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ParsedOutput:
    """Output split into content text and tool calls."""

    content: str
    calls: tuple[ParsedToolCall, ...]


class ToolCallParser(Protocol):
    """What a specialist needs from a tool-call format."""

    name: str
    call_prefix: str
    """Text that opens a call; appended to the prompt when a call is forced."""
    start: str
    """The tag that opens a call in the output (calls are streamed from it, `tool_stream.py`)."""
    end: str
    """The tag that closes a call; a stop string when only one call is allowed (parallel_tool_calls false)."""

    def parse(self, text: str, tools: tuple[ToolSpec, ...]) -> ParsedOutput:
        """Splits complete output (auto mode) into content and valid calls."""
        ...

    def forced_call_schema(self, tools: tuple[ToolSpec, ...]) -> dict[str, Any]:
        """JSON schema of the text after `call_prefix` when one of `tools` must be called."""
        ...

    def parse_forced(self, text: str, tools: tuple[ToolSpec, ...]) -> ParsedToolCall:
        """The call in constrained output (the text after `call_prefix`); ValueError if invalid."""
        ...


def new_call_id() -> str:
    """An OpenAI-style tool call id."""
    return "call_" + uuid.uuid4().hex[:24]


def arguments_error(arguments: Any, tool: ToolSpec) -> str | None:
    """Why `arguments` do not satisfy the tool's schema, or None when they do."""
    if not isinstance(arguments, dict):
        return f"arguments of {tool.name} must be a JSON object"
    error = jsonschema.exceptions.best_match(
        jsonschema.validators.validator_for(tool.parameters, default=jsonschema.Draft202012Validator)(
            tool.parameters
        ).iter_errors(arguments)
    )
    return None if error is None else f"arguments of {tool.name} fail its schema: {error.message}"


class HermesParser:
    """`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks (Hermes, Qwen2.5)."""

    name = "hermes"
    start = "<tool_call>"
    end = "</tool_call>"
    call_prefix = "<tool_call>\n"

    def parse(self, text: str, tools: tuple[ToolSpec, ...]) -> ParsedOutput:
        content: list[str] = []
        calls: list[ParsedToolCall] = []
        pos = 0
        while True:
            start = text.find(self.start, pos)
            if start < 0:
                content.append(text[pos:])
                break
            content.append(text[pos:start])
            body_at = start + len(self.start)
            end = text.find(self.end, body_at)
            block_end = len(text) if end < 0 else end + len(self.end)
            call = self._call(text[body_at : len(text) if end < 0 else end], tools)
            if call is None:
                content.append(text[start:block_end])
            else:
                calls.append(call)
            pos = block_end
        return ParsedOutput(content="".join(content).rstrip() if calls else "".join(content), calls=tuple(calls))

    def forced_call_schema(self, tools: tuple[ToolSpec, ...]) -> dict[str, Any]:
        variants = [
            {
                "type": "object",
                "properties": {"name": {"const": t.name}, "arguments": t.parameters},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
            for t in tools
        ]
        return variants[0] if len(variants) == 1 else {"anyOf": variants}

    def parse_forced(self, text: str, tools: tuple[ToolSpec, ...]) -> ParsedToolCall:
        body = text.split(self.end, 1)[0]
        try:
            value = json.loads(body)
        except json.JSONDecodeError as exc:
            raise ValueError(f"forced tool call is not valid JSON: {exc}") from None
        tool = next((t for t in tools if isinstance(value, dict) and t.name == value.get("name")), None)
        if tool is None:
            raise ValueError(f"forced tool call names no offered function: {body[:80]!r}")
        problem = arguments_error(value.get("arguments"), tool)
        if problem:
            raise ValueError(problem)
        return ParsedToolCall(id=new_call_id(), name=tool.name, arguments=json.dumps(value["arguments"]))

    def _call(self, body: str, tools: tuple[ToolSpec, ...]) -> ParsedToolCall | None:
        try:
            value = json.loads(body)
        except json.JSONDecodeError:
            return None
        if not isinstance(value, dict):
            return None
        tool = next((t for t in tools if t.name == value.get("name")), None)
        arguments = value.get("arguments", value.get("parameters", {}))
        if isinstance(arguments, str):  # some models emit arguments as a JSON string
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                return None
        if tool is None or arguments_error(arguments, tool):
            return None
        return ParsedToolCall(id=new_call_id(), name=tool.name, arguments=json.dumps(arguments))


_REGISTRY: dict[str, Callable[[], ToolCallParser]] = {"hermes": HermesParser}


def register_parser(name: str, factory: Callable[[], ToolCallParser]) -> None:
    """Makes a parser available to profiles under `name` (replacing any parser of that name)."""
    _REGISTRY[name] = factory


def get_parser(name: str) -> ToolCallParser:
    """A new parser registered as `name`; KeyError lists the known names."""
    try:
        return _REGISTRY[name]()
    except KeyError:
        raise KeyError(f"unknown tool-call parser {name!r}; registered: {', '.join(sorted(_REGISTRY))}") from None


def parser_names() -> list[str]:
    """Registered parser names."""
    return sorted(_REGISTRY)
