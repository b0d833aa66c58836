"""After the engine finished: parse tool calls, validate constrained output, refuse truncated structures.

Structured answers are all-or-nothing: a forced tool call or a UI description that hit
max_new_tokens is an OutputTruncatedError, one that fails validation an OutputInvalidError;
JSON response formats are validated too (text was already streamed, so only a failure is
reported). Nothing here imports grpc.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from macaron.prompting import ChatRequest
from macaron.specialist.errors import OutputInvalidError, OutputTruncatedError
from macaron.specialist.events import Event, TextDelta, ToolCalls
from macaron.specialist.finish import Finish
from macaron.specialist.profiles import OutputPlan, Profile
from macaron.specialist.ui_schema import UIValidationError, max_output_bytes, validate_ui


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
            raise OutputTruncatedError(
                f"the tool call did not fit in max_new_tokens={budget}; raise max_new_tokens"
            )
        try:
            call = parser.parse_forced(text, request.tools)
        except ValueError as exc:
            raise OutputInvalidError(f"the engine's constrained tool call is invalid: {exc}") from exc
        return [ToolCalls((call,))]
    if plan.mode == "ui":
        if finish.reason == "length":
            raise OutputTruncatedError(
                f"the UI description did not fit in max_new_tokens={budget}; a complete one needs at most "
                f"{max_output_bytes()} tokens"
            )
        try:
            validate_ui(text)
        except UIValidationError as exc:
            raise OutputInvalidError(str(exc)) from exc
        return [TextDelta(text)]
    return []


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
