"""What a generation yields, in order: RouteInfo, then TextDelta / ToolCalls, then Done."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from macaron.specialist.finish import Finish
from macaron.specialist.tool_parsers import ParsedToolCall


@dataclass(frozen=True, slots=True)
class RouteInfo:
    """Which adapter and replica serve the request (sent once a replica answered)."""

    adapter: str
    adapter_version: str
    replica: str


@dataclass(frozen=True, slots=True)
class TextDelta:
    """New content text."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCalls:
    """Complete tool calls, parsed and checked."""

    calls: tuple[ParsedToolCall, ...]


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int


@dataclass(frozen=True, slots=True)
class Done:
    """The last event: why it finished and the token counts."""

    finish: Finish
    usage: Usage


Event = Union[RouteInfo, TextDelta, ToolCalls, Done]
