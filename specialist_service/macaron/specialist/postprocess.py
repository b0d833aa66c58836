"""After the engine finished: parse tool calls, validate constrained output, hand back what fit.

A forced tool call, a UI description or an A2UI answer that hit max_new_tokens is answered as OpenAI answers
it: what fit (the call's partial arguments, the partial UI text) with finish reason `length`,
never an error. A complete one that fails validation is an OutputInvalidError; JSON response
formats are validated too (text was already streamed, so only a failure is reported). Nothing
here imports grpc.
"""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema

from macaron.prompting import ChatRequest, ToolSpec
from macaron.specialist.errors import OutputInvalidError
from macaron.specialist.events import Event, TextDelta, ToolCalls
from macaron.specialist.finish import Finish
from macaron.specialist.profiles import OutputPlan, Profile
from macaron.specialist.tool_parsers import ParsedToolCall, new_call_id
from macaron.specialist.ui_schema import UIValidationError, validate_ui


def finish_output(
    text: str, emitted: int, finish: Finish, request: ChatRequest, plan: OutputPlan, profile: Profile, budget: int
) -> list[Event]:
    """Events after the stream: the content not yet sent, parsed calls, the validated structured output.

    `emitted` is how much of `text` was already streamed as content; `budget` the max_new_tokens used.
    """
    parser = profile.parser
    if plan.mode == "json" and finish.reason == "stop" and not isinstance(finish.matched, str):
        _validate_json(text, plan.schema or {})  # (a caller's stop string may legitimately cut the JSON)
    if plan.mode == "tools" and parser is not None:
        parsed = parser.parse(text, request.tools)
        events: list[Event] = []
        if len(parsed.content) > emitted:
            events.append(TextDelta(parsed.content[emitted:]))
        if parsed.calls:
            events.append(ToolCalls(parsed.calls))
        return events
    if plan.mode == "forced_tool" and parser is not None:
        if finish.reason == "length":
            return [ToolCalls((partial_forced_call(text, _forced_tools(request)),))]
        try:
            call = parser.parse_forced(text, request.tools)
        except ValueError as exc:
            raise OutputInvalidError(f"the engine's constrained tool call is invalid: {exc}") from exc
        return [ToolCalls((call,))]
    if plan.mode == "ui":
        if finish.reason == "length":
            return [TextDelta(text)]  # what fit; a complete UI description needs at most max_output_bytes() tokens
        try:
            validate_ui(text)
        except UIValidationError as exc:
            raise OutputInvalidError(str(exc)) from exc
        return [TextDelta(text)]
    if plan.mode == "a2ui":
        from macaron.a2ui.validate import A2uiOutputError, validate_a2ui

        if finish.reason == "length":
            return [TextDelta(text)]  # what fit; a complete answer needs at most macaron.a2ui.max_output_bytes() tokens
        try:
            messages = validate_a2ui(text, prune=profile.a2ui.prune)
        except A2uiOutputError as exc:
            raise OutputInvalidError(str(exc)) from exc
        return [TextDelta(json.dumps(messages, ensure_ascii=False) if profile.a2ui.prune else text)]
    return []


_NAME = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_ARGUMENTS = re.compile(r'"arguments"\s*:\s*')


def _forced_tools(request: ChatRequest) -> tuple[ToolSpec, ...]:
    name = request.tool_choice.function_name
    return tuple(t for t in request.tools if t.name == name) if name else request.tools


def partial_forced_call(text: str, tools: tuple[ToolSpec, ...]) -> ParsedToolCall:
    """The call a forced `{"name": ..., "arguments": {...}}` was writing when max_new_tokens cut it:
    the function's name (from the text, else the only tool it could be) and the arguments' JSON text so far."""
    body = text.split("</tool_call>", 1)[0]
    named = _NAME.search(body)
    name = named.group(1) if named else (tools[0].name if len(tools) == 1 else "")
    arguments = _ARGUMENTS.search(body)
    return ParsedToolCall(id=new_call_id(), name=name, arguments=body[arguments.end():] if arguments else "")


def _validate_json(text: str, schema: dict[str, Any]) -> None:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OutputInvalidError(f"the engine's constrained output is not valid JSON: {exc}") from exc
    error = jsonschema.exceptions.best_match(
        jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)(schema).iter_errors(value)
    )
    if error is not None:
        raise OutputInvalidError(f"the engine's constrained output fails the schema: {error.message}")
