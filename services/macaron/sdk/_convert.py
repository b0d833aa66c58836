"""SDK params → `macaron.v1` protobufs, and protobufs → SDK results. No grpc calls here.

Malformed params (an unknown role, a non-text content part) raise ValueError/TypeError at once:
they are programming errors; everything the server checks (schemas, ranges, context) comes
back as BadRequestError.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from macaron.sdk.types import (
    ChatChunk,
    ChatResult,
    Classification,
    FinishReason,
    FunctionCall,
    MessageParam,
    ResponseFormatParam,
    Route,
    RouteReason,
    ToolCall,
    ToolCallDelta,
    ToolChoiceParam,
    ToolParam,
    TokenLogprob,
    TopLogprob,
    Usage,
)
from macaron.v1 import common_pb2 as pb
from macaron.v1 import router_pb2

_ROLES = {
    "system": pb.ROLE_SYSTEM,
    "developer": pb.ROLE_DEVELOPER,
    "user": pb.ROLE_USER,
    "assistant": pb.ROLE_ASSISTANT,
    "tool": pb.ROLE_TOOL,
}
SPECIALIST_KINDS = {
    "chat": pb.SPECIALIST_KIND_CHAT,
    "agent": pb.SPECIALIST_KIND_AGENT,
    "code": pb.SPECIALIST_KIND_CODE,
    "ui": pb.SPECIALIST_KIND_UI,
}
_SPECIALIST_NAMES = {v: k for k, v in SPECIALIST_KINDS.items()}
_REASONS: dict[int, RouteReason] = {
    pb.ROUTE_REASON_EXPLICIT: "explicit",
    pb.ROUTE_REASON_SESSION: "session",
    pb.ROUTE_REASON_CLASSIFIER: "classifier",
    pb.ROUTE_REASON_JUDGE: "judge",
    pb.ROUTE_REASON_DEFAULT: "default",
    pb.ROUTE_REASON_DIRECT: "direct",
}
_FINISH: dict[int, FinishReason] = {
    pb.FINISH_REASON_STOP: "stop",
    pb.FINISH_REASON_LENGTH: "length",
    pb.FINISH_REASON_TOOL_CALLS: "tool_calls",
    pb.FINISH_REASON_CONTENT_FILTER: "content_filter",
    pb.FINISH_REASON_ABORT: "abort",
}
_TOOL_CHOICE_MODES = {
    "auto": pb.TOOL_CHOICE_MODE_AUTO,
    "none": pb.TOOL_CHOICE_MODE_NONE,
    "required": pb.TOOL_CHOICE_MODE_REQUIRED,
}
_RESPONSE_FORMATS = {
    "text": pb.RESPONSE_FORMAT_TYPE_TEXT,
    "json_object": pb.RESPONSE_FORMAT_TYPE_JSON_OBJECT,
    "json_schema": pb.RESPONSE_FORMAT_TYPE_JSON_SCHEMA,
}


def build_request(
    *,
    messages: Iterable[MessageParam] = (),
    specialist: str | None = None,
    session_id: str | None = None,
    request_id: str | None = None,
    tools: Sequence[ToolParam] | None = None,
    tool_choice: ToolChoiceParam | None = None,
    response_format: ResponseFormatParam | None = None,
    max_tokens: int | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    frequency_penalty: float | None = None,
    presence_penalty: float | None = None,
    stop: str | Sequence[str] | None = None,
    seed: int | None = None,
    metadata: Mapping[str, str] | None = None,
    min_tokens: int | None = None,
    min_p: float | None = None,
    repetition_penalty: float | None = None,
    logprobs: bool | None = None,
    top_logprobs: int | None = None,
    parallel_tool_calls: bool | None = None,
    prompt: str | None = None,
) -> pb.GenerateRequest:
    """The GenerateRequest for these params (None leaves a field to the specialist's default)."""
    request = pb.GenerateRequest(request_id=request_id or "", session_id=session_id or "",
                                 logprobs=bool(logprobs), top_logprobs=top_logprobs or 0)
    if parallel_tool_calls is not None:
        request.parallel_tool_calls = parallel_tool_calls
    if prompt is not None:
        request.prompt = prompt
    if specialist not in (None, "auto"):
        if specialist not in SPECIALIST_KINDS:
            raise ValueError(f"specialist must be one of auto, {', '.join(SPECIALIST_KINDS)}; got {specialist!r}")
        request.specialist = SPECIALIST_KINDS[specialist]
    for i, message in enumerate(messages):
        request.messages.append(_message(message, i))
    for i, tool in enumerate(tools or ()):
        request.tools.append(_tool(tool, i))
    if tool_choice is not None:
        request.tool_choice.CopyFrom(_tool_choice(tool_choice))
    if response_format is not None:
        request.response_format.CopyFrom(_response_format(response_format))
    s = request.sampling
    for name, value in (
        ("max_new_tokens", max_tokens),
        ("temperature", temperature),
        ("top_p", top_p),
        ("top_k", top_k),
        ("frequency_penalty", frequency_penalty),
        ("presence_penalty", presence_penalty),
        ("seed", seed),
        ("min_new_tokens", min_tokens),
        ("min_p", min_p),
        ("repetition_penalty", repetition_penalty),
    ):
        if value is not None:
            setattr(s, name, value)
    if stop is not None:
        s.stop.extend([stop] if isinstance(stop, str) else list(stop))
    for key, value in (metadata or {}).items():
        request.metadata[str(key)] = str(value)
    return request


def text_content(content: Any, where: str) -> str:
    """A message's content as text: a string, or a list of text parts joined (OpenAI allows both)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if not isinstance(part, Mapping) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise ValueError(f"{where}.content[{j}] is a {kind!r} part; only text parts are supported")
            texts.append(part["text"])
        return "".join(texts)
    raise TypeError(f"{where}.content must be a string or a list of text parts, not {type(content).__name__}")


def _message(m: Mapping[str, Any], i: int) -> pb.ChatMessage:
    where = f"messages[{i}]"
    role = m.get("role")
    if role not in _ROLES:
        raise ValueError(f"{where}.role must be one of {', '.join(_ROLES)}; got {role!r}")
    out = pb.ChatMessage(
        role=_ROLES[role],
        content=text_content(m.get("content"), where),
        name=m.get("name") or "",
        tool_call_id=m.get("tool_call_id") or "",
    )
    for call in m.get("tool_calls") or ():
        fn = call.get("function") or {}
        out.tool_calls.append(
            pb.ToolCall(
                id=call.get("id") or "",
                type=call.get("type") or "function",
                function=pb.FunctionCall(name=fn.get("name") or "", arguments=fn.get("arguments") or ""),
            )
        )
    return out


def _tool(t: Mapping[str, Any], i: int) -> pb.Tool:
    fn = t.get("function")
    if not isinstance(fn, Mapping):
        raise ValueError(f"tools[{i}].function is missing")
    parameters = fn.get("parameters")
    return pb.Tool(
        type=t.get("type") or "function",
        function=pb.FunctionDefinition(
            name=fn.get("name") or "",
            description=fn.get("description") or "",
            parameters_json=json.dumps(parameters) if parameters is not None else "",
            strict=bool(fn.get("strict")),
        ),
    )


def _tool_choice(choice: Any) -> pb.ToolChoice:
    if isinstance(choice, str):
        if choice not in _TOOL_CHOICE_MODES:
            raise ValueError(f"tool_choice must be auto, none, required or a function; got {choice!r}")
        return pb.ToolChoice(mode=_TOOL_CHOICE_MODES[choice])
    name = (choice.get("function") or {}).get("name") if isinstance(choice, Mapping) else None
    if not name:
        raise ValueError('tool_choice as an object must be {"type": "function", "function": {"name": ...}}')
    return pb.ToolChoice(function_name=name)


def _response_format(rf: Mapping[str, Any]) -> pb.ResponseFormat:
    kind = rf.get("type")
    if kind not in _RESPONSE_FORMATS:
        raise ValueError(f"response_format.type must be one of {', '.join(_RESPONSE_FORMATS)}; got {kind!r}")
    out = pb.ResponseFormat(type=_RESPONSE_FORMATS[kind])
    if kind == "json_schema":
        js = rf.get("json_schema") or {}
        schema = js.get("schema")
        out.json_schema.CopyFrom(
            pb.JsonSchemaFormat(
                name=js.get("name") or "",
                description=js.get("description") or "",
                schema_json=json.dumps(schema) if schema is not None else "",
                strict=bool(js.get("strict")),
            )
        )
    return out


# ---------------------------------------------------------------- results


def route_from_proto(r: pb.RouteDecision) -> Route:
    return Route(
        specialist=_SPECIALIST_NAMES.get(r.specialist),  # type: ignore[arg-type]
        reason=_REASONS.get(r.reason, "unspecified"),
        confidence=r.confidence,
        adapter=r.adapter,
        adapter_version=r.adapter_version,
        replica=r.replica,
        detail=r.detail,
        route_ms=r.route_ms,
    )


def chunk_from_proto(c: pb.GenerateChunk) -> ChatChunk:
    finish = c.finish if c.HasField("finish") and c.finish.reason != pb.FINISH_REASON_UNSPECIFIED else None
    stop_text = finish.matched_text if finish is not None and finish.WhichOneof("matched") == "matched_text" else None
    return ChatChunk(
        request_id=c.request_id,
        text=c.text,
        tool_calls=tuple(ToolCallDelta(t.index, t.id, t.name, t.arguments) for t in c.tool_calls),
        route=route_from_proto(c.route) if c.HasField("route") else None,
        finish_reason=_FINISH.get(finish.reason, "stop") if finish is not None else None,
        usage=Usage(c.usage.prompt_tokens, c.usage.completion_tokens, c.usage.cached_tokens)
        if c.HasField("usage")
        else None,
        stop_text=stop_text,
        logprobs=tuple(
            TokenLogprob(t.token, t.logprob, t.bytes, tuple(TopLogprob(o.token, o.logprob, o.bytes) for o in t.top_logprobs))
            for t in c.logprobs
        ),
    )


def classification_from_proto(r: router_pb2.ClassifyResponse) -> Classification:
    return Classification(
        route=route_from_proto(r.route),
        probabilities={_SPECIALIST_NAMES.get(p.specialist, str(p.specialist)): p.probability for p in r.probabilities},
        decision_ms=r.decision_ms,
    )


class Accumulator:
    """Folds a stream's chunks into one ChatResult (text joined, tool-call deltas merged)."""

    def __init__(self, logprobs: bool = False) -> None:
        self.want_logprobs = logprobs
        """The request asked for logprobs: the result carries them (an empty tuple if no token came)."""
        self.request_id = ""
        self.texts: list[str] = []
        self.route: Route | None = None
        self.finish_reason: FinishReason | None = None
        self.usage: Usage | None = None
        self.stop_text: str | None = None
        self.logprobs: list[TokenLogprob] = []
        self._calls: dict[int, dict[str, str]] = {}

    def add(self, chunk: ChatChunk) -> None:
        self.request_id = self.request_id or chunk.request_id
        if chunk.route is not None and self.route is None:
            self.route = chunk.route
        if chunk.text:
            self.texts.append(chunk.text)
        self.logprobs.extend(chunk.logprobs)
        for delta in chunk.tool_calls:
            call = self._calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            call["id"] = call["id"] or delta.id
            call["name"] = call["name"] or delta.name
            call["arguments"] += delta.arguments
        if chunk.finish_reason is not None:
            self.finish_reason = chunk.finish_reason
            self.stop_text = chunk.stop_text
        if chunk.usage is not None:
            self.usage = chunk.usage

    def result(self) -> ChatResult:
        calls = tuple(
            # a call cut by max_tokens keeps what fit, even nothing; a finished one without arguments has {}
            ToolCall(id=c["id"], function=FunctionCall(c["name"], c["arguments"] or ("" if self.finish_reason == "length" else "{}")))
            for _, c in sorted(self._calls.items())
        )
        return ChatResult(
            request_id=self.request_id,
            text="".join(self.texts),
            route=self.route or Route(None, "unspecified", 0.0),
            finish_reason=self.finish_reason or "stop",
            usage=self.usage or Usage(0, 0, 0),
            tool_calls=calls,
            stop_text=self.stop_text,
            logprobs=tuple(self.logprobs) if self.want_logprobs or self.logprobs else None,
        )
