"""Plain, validated request types: what a chat request means, independent of the wire format.

Built from protobufs by `convert.py` (router and specialists alike) and from OpenAI JSON by the
gateway; nothing here imports grpc or protobuf.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]
ToolChoiceMode = Literal["auto", "none", "required", "function"]
ResponseFormatType = Literal["text", "json_object", "json_schema"]


class RequestError(ValueError):
    """A request that cannot be served as sent; the message names the field and what is wrong."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call of an assistant message; `arguments` is JSON text, as OpenAI sends it."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message (developer messages arrive here as `system`)."""

    role: Role
    content: str = ""
    name: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A function the model may call; `parameters` is its (checked) JSON schema."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def openai_dict(self) -> dict[str, Any]:
        """The OpenAI `tools[]` entry, as chat templates expect it."""
        function: dict[str, Any] = {"name": self.name}
        if self.description:
            function["description"] = self.description
        function["parameters"] = self.parameters
        return {"type": "function", "function": function}


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """`auto`, `none`, `required`, or `function` with `function_name` set."""

    mode: ToolChoiceMode = "auto"
    function_name: str | None = None

    @property
    def forces_call(self) -> bool:
        """True when the answer must be a tool call (decoding is constrained)."""
        return self.mode in ("required", "function")


@dataclass(frozen=True, slots=True)
class ResponseFormat:
    """The output's shape; `schema` is set (and checked) for json_schema."""

    type: ResponseFormatType = "text"
    schema: dict[str, Any] | None = None
    name: str = ""


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """Everything about a request that decides the prompt and the output's constraints."""

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoice = ToolChoice()
    response_format: ResponseFormat = ResponseFormat()
    response_format_given: bool = False
    """False when the caller left response_format unset (the profile's default applies)."""
    parallel_tool_calls: bool = True
    """False: generation stops once the first tool call is complete (OpenAI's parallel_tool_calls)."""
    prompt: str | None = None
    """A plain prompt (OpenAI's completions): rendered as it is, without template or profile prompt;
    `messages` then holds it as one user message, for the router's classifier and judge."""

    def tool(self, name: str) -> ToolSpec | None:
        """The offered tool called `name`, if any."""
        return next((t for t in self.tools if t.name == name), None)
