"""After the engine finished: validate constrained output, hand back what fit.

Tool calls are streamed while they are generated (`tool_stream.py`); a complete forced call is
checked here. A forced tool call, a UI description or an A2UI answer that hit max_new_tokens is
answered as OpenAI answers it: what fit (the call's partial arguments, the partial UI text) with
finish reason `length`, never an error. A complete one that fails validation is an
OutputInvalidError; JSON response formats are validated too (text was already streamed, so only a
failure is reported). Nothing here imports grpc.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from macaron.prompting import ChatRequest
from macaron.specialist.errors import OutputInvalidError
from macaron.specialist.events import Event, TextDelta
from macaron.specialist.finish import Finish
from macaron.specialist.profiles import OutputPlan, Profile
from macaron.specialist.ui_schema import UIValidationError, validate_ui


def finish_output(
    text: str, finish: Finish, request: ChatRequest, plan: OutputPlan, profile: Profile, budget: int
) -> list[Event]:
    """Events after the stream: the validated structured output (text and tool calls were streamed
    already). `budget` is the max_new_tokens used.
    """
    parser = profile.parser
    if plan.mode == "json" and finish.reason == "stop" and not isinstance(finish.matched, str):
        _validate_json(text, plan.schema or {})  # (a caller's stop string may legitimately cut the JSON)
    if plan.mode == "forced_tool" and parser is not None and finish.reason != "length":
        try:
            parser.parse_forced(text, request.tools)
        except ValueError as exc:
            raise OutputInvalidError(f"the engine's constrained tool call is invalid: {exc}") from exc
        return []
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
