"""A request as weighted text segments plus tool signals.

Single text: one segment of weight 1. OpenAI-style `messages`: the last user turn carries
`last_turn_weight` of the decision; earlier user and assistant turns (at most `max_turns`)
share the rest, halving with each step back, assistant turns counting half a user turn.
A short last turn ("make it nicer", "and in Rust?") says little on its own: below
`SHORT_TURN_WORDS` words its share shrinks in proportion, so the conversation decides.
Tool declarations and tool activity (assistant `tool_calls`, `tool`/`function` results) are
signals, not text: their JSON would read as code. System prompts are left out: they are
application boilerplate, the same whatever the user asks. A label before a turn ("Turn 2:", "Q3.")
is read past (`without_turn_label`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from macaron.router.classifier.errors import ClassificationInputError

SHORT_TURN_WORDS = 8
# A label before a turn, as transcripts and scripted clients number them ("Turn 2: tell me more", "Q3. Why?",
# "Step 4 - now the tests"): it names no domain, yet "turn" and "step" are assistant words ("turn on the lights")
# and a number and a colon read as a request's form, so a numbered "tell me more" left its session.
_TURN_LABEL = re.compile(
    r"^\s*(?:turn|step|question|q|part|task|round|exercise|problem)\s*#?\d{1,3}\s*[:.,)\]\-\u2013]\s*(?=\S)", re.I)


@dataclass(frozen=True, slots=True)
class Segment:
    """One piece of text and its share of the decision (shares sum to 1)."""

    text: str
    weight: float


@dataclass(frozen=True, slots=True)
class Conversation:
    """What the classifier reads: weighted segments and the tool signals."""

    segments: tuple[Segment, ...]
    has_tools: bool = False
    has_tool_activity: bool = False
    history: tuple[Segment, ...] = ()  # earlier turns, weights summing to 1 (newest first)
    tool_loop_open: bool = False  # the newest messages are results of tools the last assistant turn called

    @property
    def last_text(self) -> str:
        return self.segments[0].text

    @property
    def last_words(self) -> int:
        return len(self.segments[0].text.split())


def bound_text(text: str, max_chars: int) -> str:
    """Texts longer than `max_chars` keep their first 3/4 and last 1/4 of the bound."""
    if len(text) <= max_chars:
        return text
    head = (max_chars * 3) // 4
    tail = max_chars - head - 1
    return text[:head] + "\n" + text[len(text) - tail :]


def without_turn_label(text: str) -> str:
    """The turn without a leading label ("Turn 2:", "Q3.", "Step 4 -"); a label alone is left as it is."""
    return _TURN_LABEL.sub("", text, count=1)


def ensure_text(value: Any, what: str) -> str:
    """A str that is valid Unicode; bytes must be UTF-8; anything else is refused."""
    if isinstance(value, bytes | bytearray | memoryview):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ClassificationInputError(
                f"{what} is not valid UTF-8 (invalid byte at offset {exc.start}); send UTF-8 text"
            ) from None
    if not isinstance(value, str):
        raise ClassificationInputError(f"{what} must be a string, got {type(value).__name__}")
    return value


def _check_encodable(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ClassificationInputError(
            f"{what} holds characters that are not valid Unicode (a lone surrogate at {exc.start}); "
            "send UTF-8 text"
        ) from None


def content_text(content: Any, what: str) -> str:
    """The text of a message's `content`: a string, or a list of parts with `type: text`."""
    if content is None:
        return ""
    if isinstance(content, Sequence) and not isinstance(content, str | bytes | bytearray):
        texts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type", "text") == "text" and "text" in part:
                texts.append(ensure_text(part["text"], what))
            elif isinstance(part, str | bytes):
                texts.append(ensure_text(part, what))
        return "\n".join(texts)
    return ensure_text(content, what)


def from_text(text: Any, max_chars: int) -> Conversation:
    text = without_turn_label(bound_text(ensure_text(text, "text"), max_chars))
    if not text.strip():
        raise ClassificationInputError("text is empty; send the user's request")
    _check_encodable(text, "text")
    return Conversation(segments=(Segment(text, 1.0),))


def from_messages(
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Any] | None,
    max_chars: int,
    max_turns: int,
    last_turn_weight: float,
) -> Conversation:
    if not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
        raise ClassificationInputError("messages must be a list of {role, content} objects")
    # Walk back from the end: only the last user turn and the `max_turns - 1` turns before it
    # are read, so a very long history costs no more than a short one.
    recent: list[tuple[str, str]] = []  # (role, text), newest first
    tool_activity = False
    have_user = False
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if not isinstance(message, Mapping):
            raise ClassificationInputError(f"messages[{i}] must be an object with role and content")
        role = message.get("role")
        if role in ("tool", "function") or message.get("tool_call_id"):
            tool_activity = True
            continue
        if role == "assistant" and (message.get("tool_calls") or message.get("function_call")):
            tool_activity = True
        if role not in ("user", "assistant") or (not have_user and role != "user"):
            continue  # system prompts; assistant text after the last user turn
        text = without_turn_label(bound_text(content_text(message.get("content"), f"messages[{i}].content"), max_chars))
        if not text.strip():
            continue
        _check_encodable(text, f"messages[{i}].content")
        recent.append((role, text))
        have_user = True
        if len(recent) >= max_turns:
            break
    if not have_user:
        raise ClassificationInputError("messages hold no user turn with text; send the user's request")
    loop_open = _tool_loop_open(messages)
    turns = recent[::-1]
    last_user = len(turns) - 1
    earlier = turns[:last_user]
    raw: list[tuple[str, float]] = []
    for distance, (role, text) in enumerate(reversed(earlier), start=1):
        raw.append((text, (0.5 if role == "assistant" else 1.0) * 0.5 ** (distance - 1)))
    total = sum(w for _, w in raw)
    last_text = turns[last_user][1]
    share = last_turn_weight * min(1.0, len(last_text.split()) / SHORT_TURN_WORDS) if raw else 1.0
    segments = [Segment(last_text, share)]
    segments += [Segment(text, (1.0 - share) * w / total) for text, w in raw]
    history = tuple(Segment(text, w / total) for text, w in raw) if raw else ()
    return Conversation(segments=tuple(segments), has_tools=bool(tools), has_tool_activity=tool_activity,
                        history=history, tool_loop_open=loop_open)


def _tool_loop_open(messages: Sequence[Mapping[str, Any]]) -> bool:
    """True when the newest messages are tool results and the turn before them called tools."""
    i = len(messages) - 1
    if i < 0 or not _is_tool_result(messages[i]):
        return False
    while i >= 0 and _is_tool_result(messages[i]):
        i -= 1
    m = messages[i] if i >= 0 else None
    return isinstance(m, Mapping) and m.get("role") == "assistant" and bool(m.get("tool_calls") or m.get("function_call"))


def _is_tool_result(message: Any) -> bool:
    return isinstance(message, Mapping) and (message.get("role") in ("tool", "function") or bool(message.get("tool_call_id")))
