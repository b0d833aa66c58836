"""`macaron.v1` protobuf request → validated ChatRequest (shared by router and specialists).

Every check raises RequestError with the offending field's path, so a servicer only maps it to
INVALID_ARGUMENT. Imports protobuf messages, never grpc.
"""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema

from macaron.prompting.messages import (
    ChatRequest,
    Message,
    RequestError,
    ResponseFormat,
    Role,
    ToolCall,
    ToolChoice,
    ToolSpec,
)
from macaron.prompting.formats import is_named_format, named_formats_hint
from macaron.v1 import common_pb2 as pb

FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
DEFAULT_MAX_MESSAGES = 1024
DEFAULT_MAX_TOOLS = 128
MAX_TOP_LOGPROBS = 20
"""OpenAI's limit for top_logprobs."""

_ROLES: dict[int, Role] = {
    pb.ROLE_SYSTEM: "system",
    pb.ROLE_DEVELOPER: "system",
    pb.ROLE_USER: "user",
    pb.ROLE_ASSISTANT: "assistant",
    pb.ROLE_TOOL: "tool",
}
_RESPONSE_FORMATS = {
    pb.RESPONSE_FORMAT_TYPE_TEXT: "text",
    pb.RESPONSE_FORMAT_TYPE_JSON_OBJECT: "json_object",
    pb.RESPONSE_FORMAT_TYPE_JSON_SCHEMA: "json_schema",
}


def request_from_proto(
    request: pb.GenerateRequest, *, max_messages: int = DEFAULT_MAX_MESSAGES, max_tools: int = DEFAULT_MAX_TOOLS
) -> ChatRequest:
    """The request's meaning, checked; raises RequestError naming the first bad field."""
    check_logprobs(request)
    if request.HasField("prompt"):
        return _plain_prompt(request)
    if not request.messages:
        raise RequestError("messages is empty: send at least one message")
    if len(request.messages) > max_messages:
        raise RequestError(f"messages has {len(request.messages)} entries; at most {max_messages} are allowed")
    if len(request.tools) > max_tools:
        raise RequestError(f"tools has {len(request.tools)} entries; at most {max_tools} are allowed")
    messages = tuple(_message(m, f"messages[{i}]") for i, m in enumerate(request.messages))
    tools = tuple(_tool(t, f"tools[{i}]") for i, t in enumerate(request.tools))
    names = [t.name for t in tools]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise RequestError(f"tools: function names must be unique, {', '.join(duplicates)} repeated")
    tool_choice = _tool_choice(request, tools)
    response_format = _response_format(request.response_format)
    if tool_choice.forces_call and response_format.type != "text":
        raise RequestError(
            "tool_choice forces a tool call, which cannot also follow response_format "
            f"{response_format.type}; drop one of them"
        )
    return ChatRequest(
        messages=messages,
        tools=tools,
        tool_choice=tool_choice,
        response_format=response_format,
        response_format_given=request.HasField("response_format")
        and request.response_format.type != pb.RESPONSE_FORMAT_TYPE_UNSPECIFIED,
        parallel_tool_calls=request.parallel_tool_calls if request.HasField("parallel_tool_calls") else True,
    )


def check_logprobs(request: pb.GenerateRequest) -> None:
    """logprobs / top_logprobs as OpenAI allows them: top_logprobs in [0, 20], and only with logprobs."""
    if not 0 <= request.top_logprobs <= MAX_TOP_LOGPROBS:
        raise RequestError(f"top_logprobs must be in [0, {MAX_TOP_LOGPROBS}], got {request.top_logprobs}")
    if request.top_logprobs and not request.logprobs:
        raise RequestError("top_logprobs needs logprobs set to true")


def _plain_prompt(request: pb.GenerateRequest) -> ChatRequest:
    """A completion's plain prompt: no messages, tools or tool_choice; the output constraints still apply."""
    for name in ("messages", "tools"):
        if len(getattr(request, name)):
            raise RequestError(f"{name} must be empty when prompt is set: a plain prompt is sent as it is")
    if request.HasField("tool_choice"):
        raise RequestError("tool_choice needs tools, which a plain prompt cannot have")
    if not request.prompt:
        raise RequestError("prompt is empty: send at least one character")
    response_format = _response_format(request.response_format)
    return ChatRequest(
        messages=(Message(role="user", content=request.prompt),),
        response_format=response_format,
        response_format_given=request.HasField("response_format")
        and request.response_format.type != pb.RESPONSE_FORMAT_TYPE_UNSPECIFIED,
        prompt=request.prompt,
    )


def _message(m: pb.ChatMessage, where: str) -> Message:
    role = _ROLES.get(m.role)
    if role is None:
        known = ", ".join(pb.Role.Name(v) for v in _ROLES)
        raise RequestError(f"{where}.role is {_enum_name(pb.Role, m.role)}; use one of {known}")
    if m.tool_calls and role != "assistant":
        raise RequestError(f"{where}.tool_calls is only allowed on assistant messages, not {role}")
    if role == "tool" and not m.tool_call_id:
        raise RequestError(f"{where}.tool_call_id is empty: a tool message must name the call it answers")
    calls = tuple(_tool_call(c, f"{where}.tool_calls[{i}]") for i, c in enumerate(m.tool_calls))
    return Message(role=role, content=m.content, name=m.name, tool_calls=calls, tool_call_id=m.tool_call_id)


def _tool_call(c: pb.ToolCall, where: str) -> ToolCall:
    if c.type not in ("", "function"):
        raise RequestError(f"{where}.type is {c.type!r}; only 'function' is supported")
    if not FUNCTION_NAME.match(c.function.name):
        raise RequestError(f"{where}.function.name {c.function.name!r} must match {FUNCTION_NAME.pattern}")
    arguments = c.function.arguments or "{}"
    if not isinstance(_json(arguments, f"{where}.function.arguments"), dict):
        raise RequestError(f"{where}.function.arguments must be a JSON object")
    return ToolCall(id=c.id, name=c.function.name, arguments=arguments)


def _tool(t: pb.Tool, where: str) -> ToolSpec:
    if t.type not in ("", "function"):
        raise RequestError(f"{where}.type is {t.type!r}; only 'function' is supported")
    fn = t.function
    if not FUNCTION_NAME.match(fn.name):
        raise RequestError(f"{where}.function.name {fn.name!r} must match {FUNCTION_NAME.pattern}")
    if not fn.parameters_json:
        return ToolSpec(name=fn.name, description=fn.description)
    parameters = _schema(fn.parameters_json, f"{where}.function.parameters_json")
    if parameters.get("type", "object") != "object":
        raise RequestError(f"{where}.function.parameters_json must describe an object, not {parameters['type']!r}")
    return ToolSpec(name=fn.name, description=fn.description, parameters=parameters)


def _tool_choice(request: pb.GenerateRequest, tools: tuple[ToolSpec, ...]) -> ToolChoice:
    choice = request.tool_choice
    kind = choice.WhichOneof("choice")
    if kind == "function_name":
        if not any(t.name == choice.function_name for t in tools):
            offered = ", ".join(t.name for t in tools) or "none"
            raise RequestError(
                f"tool_choice.function_name {choice.function_name!r} is not among the offered tools ({offered})"
            )
        return ToolChoice(mode="function", function_name=choice.function_name)
    mode = choice.mode if kind == "mode" else pb.TOOL_CHOICE_MODE_UNSPECIFIED
    if mode in (pb.TOOL_CHOICE_MODE_UNSPECIFIED, pb.TOOL_CHOICE_MODE_AUTO):
        return ToolChoice(mode="auto")
    if mode == pb.TOOL_CHOICE_MODE_NONE:
        return ToolChoice(mode="none")
    if mode == pb.TOOL_CHOICE_MODE_REQUIRED:
        if not tools:
            raise RequestError("tool_choice is REQUIRED but no tools are offered")
        return ToolChoice(mode="required")
    raise RequestError(f"tool_choice.mode is {_enum_name(pb.ToolChoiceMode, mode)}")


def _response_format(rf: pb.ResponseFormat) -> ResponseFormat:
    if rf.type == pb.RESPONSE_FORMAT_TYPE_UNSPECIFIED:
        return ResponseFormat()
    kind = _RESPONSE_FORMATS.get(rf.type)
    if kind is None:
        raise RequestError(f"response_format.type is {_enum_name(pb.ResponseFormatType, rf.type)}")
    if kind != "json_schema":
        return ResponseFormat(type=kind)  # type: ignore[arg-type]
    if not rf.json_schema.schema_json:
        if is_named_format(rf.json_schema.name):  # the specialist fills in the schema
            return ResponseFormat(type="json_schema", name=rf.json_schema.name)
        raise RequestError(
            "response_format.json_schema.schema_json is empty: JSON_SCHEMA needs a schema, or a name the "
            f"specialists know without one: {named_formats_hint()}"
        )
    schema = _schema(rf.json_schema.schema_json, "response_format.json_schema.schema_json")
    return ResponseFormat(type="json_schema", schema=schema, name=rf.json_schema.name)


MAX_JSON_DEPTH = 64
"""Deepest nesting of objects and arrays in a schema or arguments: deeper ones would exhaust the
recursion of the JSON encoder, the schema checker and the grammar compiler (a 500, not a 400)."""


def _json(text: str, where: str) -> Any:
    try:
        value = json.loads(text)
    except RecursionError:
        raise RequestError(_too_deep(where)) from None
    except json.JSONDecodeError as exc:
        raise RequestError(f"{where} is not valid JSON: {exc}") from None
    if _depth_over(value, MAX_JSON_DEPTH):
        raise RequestError(_too_deep(where))
    return value


def _too_deep(where: str) -> str:
    return f"{where} is nested too deeply: at most {MAX_JSON_DEPTH} levels of objects and arrays are allowed"


def _depth_over(value: Any, limit: int) -> bool:
    """Whether objects and arrays nest deeper than `limit` (walked without recursion)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth >= limit:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


def _schema(text: str, where: str) -> dict[str, Any]:
    """A JSON object that is a valid JSON schema (its own $schema's draft, else 2020-12)."""
    schema = _json(text, where)
    if not isinstance(schema, dict):
        raise RequestError(f"{where} must be a JSON object (a JSON schema), got {type(schema).__name__}")
    validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        path = "/".join(str(p) for p in exc.path) or "(root)"
        raise RequestError(f"{where} is not a valid JSON schema at {path}: {exc.message}") from None
    return schema


def _enum_name(enum: Any, value: int) -> str:
    try:
        return str(enum.Name(value))
    except ValueError:
        return f"unknown value {value}"
