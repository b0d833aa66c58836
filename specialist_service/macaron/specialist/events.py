"""What a generation yields, in order: RouteInfo, then TextDelta / ToolCallDeltas / Logprobs, then Done."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from macaron.specialist.finish import Finish


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
class ToolCallDelta:
    """OpenAI's streamed tool-call part: the first of a call has id and name, later ones add arguments text."""

    index: int
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class ToolCallDeltas:
    """Tool-call parts, in order."""

    deltas: tuple[ToolCallDelta, ...]


@dataclass(frozen=True, slots=True)
class TopLogprob:
    token: str
    logprob: float
    bytes: bytes


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One generated token's log probability and the most likely alternatives (OpenAI's logprobs.content entry)."""

    token: str
    logprob: float
    bytes: bytes
    top_logprobs: tuple[TopLogprob, ...] = ()


@dataclass(frozen=True, slots=True)
class Logprobs:
    """Logprobs of the tokens generated since the previous Logprobs event."""

    tokens: tuple[TokenLogprob, ...]


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


Event = Union[RouteInfo, TextDelta, ToolCallDeltas, Logprobs, Done]
