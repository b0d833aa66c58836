"""Typed parameters (TypedDicts, shaped like OpenAI's) and results (frozen dataclasses).

Users never see protobufs: `_convert.py` turns these params into `macaron.v1` messages and
the router's answers into these results.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, Required, TypedDict, Union

Specialist = Literal["chat", "agent", "code", "ui"]
RouteReason = Literal["explicit", "session", "classifier", "judge", "default", "direct", "unspecified"]
FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "abort"]

# ---------------------------------------------------------------- parameters


class TextPartParam(TypedDict):
    type: Literal["text"]
    text: str


class FunctionCallParam(TypedDict):
    name: str
    arguments: str
    """JSON text of the arguments object, as OpenAI sends it."""


class ToolCallParam(TypedDict, total=False):
    id: Required[str]
    type: Literal["function"]
    function: Required[FunctionCallParam]


class MessageParam(TypedDict, total=False):
    """One chat message: role system|developer|user|assistant|tool, as in OpenAI's API."""

    role: Required[Literal["system", "developer", "user", "assistant", "tool"]]
    content: str | list[TextPartParam] | None
    name: str
    tool_calls: list[ToolCallParam]
    """Assistant messages only."""
    tool_call_id: str
    """Tool messages only: the call this result answers."""


class FunctionDefinitionParam(TypedDict, total=False):
    name: Required[str]
    description: str
    parameters: dict[str, Any]
    """JSON schema of the arguments (an object schema)."""
    strict: bool


class ToolParam(TypedDict, total=False):
    type: Literal["function"]
    function: Required[FunctionDefinitionParam]


class NamedToolChoiceParam(TypedDict):
    type: Literal["function"]
    function: dict[str, str]
    """{"name": ...}"""


ToolChoiceParam = Union[Literal["auto", "none", "required"], NamedToolChoiceParam]


class JsonSchemaParam(TypedDict, total=False):
    name: Required[str]
    description: str
    schema: dict[str, Any]
    strict: bool


class ResponseFormatParam(TypedDict, total=False):
    type: Required[Literal["text", "json_object", "json_schema"]]
    json_schema: JsonSchemaParam


# ---------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class Route:
    """Where a request went and why (the router's decision, completed by the specialist)."""

    specialist: Specialist | None
    reason: RouteReason
    confidence: float
    adapter: str = ""
    adapter_version: str = ""
    replica: str = ""
    """Base-group URL that served the request (empty for Classify)."""
    detail: str = ""
    route_ms: float = 0.0
    """Time the router took to decide and place the request (0 when no router did, e.g. Classify)."""

    @property
    def model(self) -> str:
        """The public model name of the chosen specialist (`macaron-code`, ...)."""
        return f"macaron-{self.specialist}" if self.specialist else "macaron-auto"


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of one request."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    """Prompt tokens served from the prefix cache."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class FunctionCall:
    name: str
    arguments: str
    """JSON text of the arguments object."""

    def parsed_arguments(self) -> dict[str, Any]:
        """The arguments as a dict (the specialist validated them against the tool's schema)."""
        return json.loads(self.arguments or "{}")


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    function: FunctionCall
    type: Literal["function"] = "function"


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A streamed part of a tool call: the first carries id and name, later ones add arguments."""

    index: int
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class TopLogprob:
    """One of the most likely tokens at a position."""

    token: str
    logprob: float
    bytes: bytes


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """A generated token's log probability (OpenAI's logprobs.content entry); `bytes` are exact,
    `token` is them read as UTF-8 (a character split over tokens shows as U+FFFD there)."""

    token: str
    logprob: float
    bytes: bytes
    top_logprobs: tuple[TopLogprob, ...] = ()


@dataclass(frozen=True, slots=True)
class ChatChunk:
    """One streamed chunk: the first carries `route`, the last `finish_reason` and `usage`."""

    request_id: str
    text: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = ()
    route: Route | None = None
    finish_reason: FinishReason | None = None
    usage: Usage | None = None
    stop_text: str | None = None
    """The stop string that ended the answer, when one did."""
    logprobs: tuple[TokenLogprob, ...] = ()
    """Log probabilities of the tokens generated since the previous chunk (asked with `logprobs=True`)."""


@dataclass(frozen=True, slots=True)
class ChatResult:
    """A whole answer."""

    request_id: str
    text: str
    route: Route
    finish_reason: FinishReason
    usage: Usage
    tool_calls: tuple[ToolCall, ...] = ()
    stop_text: str | None = None
    logprobs: tuple[TokenLogprob, ...] | None = None
    """Every generated token's log probability, when asked with `logprobs=True` (else None)."""


@dataclass(frozen=True, slots=True)
class Classification:
    """The decision Generate would take now, and the fast classifier's probabilities."""

    route: Route
    probabilities: dict[str, float] = field(default_factory=dict)
    """Specialist name → probability (empty when the classifier did not run)."""
    decision_ms: float = 0.0
