"""Finish reasons: SGLang's finish objects ↔ one domain value ↔ OpenAI's finish_reason strings.

| domain / OpenAI    | SGLang meta_info.finish_reason            | macaron.v1.FinishReason  |
|--------------------|-------------------------------------------|--------------------------|
| `stop`             | {"type": "stop", "matched": id or str}    | FINISH_REASON_STOP       |
| `length`           | {"type": "length", "length": n}           | FINISH_REASON_LENGTH     |
| `tool_calls`       | {"type": "stop", ...} + parsed tool calls | FINISH_REASON_TOOL_CALLS |
| `content_filter`   | (none; SGLang has no filter)              | FINISH_REASON_CONTENT_FILTER |
| `abort`            | {"type": "abort", "message": str}         | FINISH_REASON_ABORT      |

`abort` has no OpenAI value; like SGLang's own OpenAI server, the string "abort" is passed on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

FinishKind = Literal["stop", "length", "tool_calls", "content_filter", "abort"]


@dataclass(frozen=True, slots=True)
class Finish:
    """Why generation ended, with what SGLang's finish object carries."""

    reason: FinishKind
    matched: str | int | None = None
    length: int | None = None
    message: str = ""

    @property
    def openai(self) -> str:
        """OpenAI's finish_reason string."""
        return self.reason


def from_sglang(obj: dict[str, Any] | None, *, tool_calls: bool = False) -> Finish:
    """The domain finish of an SGLang finish object; `tool_calls` when calls were parsed."""
    obj = obj or {"type": "stop"}
    kind = obj.get("type")
    if kind == "length":
        return Finish("length", length=obj.get("length"))
    if kind == "abort":
        return Finish("abort", message=str(obj.get("message") or ""))
    matched = obj.get("matched")
    if isinstance(matched, list):  # some SGLang versions send a list of matched ids
        matched = matched[0] if matched else None
    return Finish("tool_calls" if tool_calls else "stop", matched=matched)


def to_sglang(finish: Finish) -> dict[str, Any]:
    """SGLang's finish object for a domain finish (tool_calls and content_filter are SGLang stops)."""
    if finish.reason == "length":
        return {"type": "length", "length": finish.length}
    if finish.reason == "abort":
        return {"type": "abort", "message": finish.message}
    return {"type": "stop", "matched": finish.matched}
