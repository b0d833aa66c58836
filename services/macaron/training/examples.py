"""One training example for a specialist adapter, and its JSONL file format.

A line is `{"messages": [...], "tools": [...] | null, "target": "...", "source": "..."}`: the
conversation exactly as the specialist sends it to the engine (its profile's system prompt
first), the tools offered, and the assistant text the adapter should produce.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


class TrainingDataError(ValueError):
    """A training file that cannot be read; the message says where and why."""


@dataclass(frozen=True)
class TrainingExample:
    messages: list[dict[str, Any]]
    target: str
    tools: list[dict[str, Any]] | None = None
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        data = asdict(self)
        extra = data.pop("extra")
        return json.dumps({**data, **extra}, ensure_ascii=False, sort_keys=True)


def read_examples(path: str | os.PathLike[str]) -> list[TrainingExample]:
    """Every example of a JSONL file; a bad line raises TrainingDataError naming it."""
    path = Path(path)
    if not path.is_file():
        raise TrainingDataError(f"{path} does not exist; make one with `macaron adapters distill` or by hand")
    out: list[TrainingExample] = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"{path}:{number}"
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise TrainingDataError(f"{where}: not valid JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise TrainingDataError(f"{where}: expected a JSON object")
        messages, target = obj.get("messages"), obj.get("target")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise TrainingDataError(f"{where}: `messages` must be a non-empty list of message objects")
        if not isinstance(target, str) or not target:
            raise TrainingDataError(f"{where}: `target` must be a non-empty string")
        tools = obj.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise TrainingDataError(f"{where}: `tools` must be a list or null")
        known = {"messages", "target", "tools", "source"}
        out.append(
            TrainingExample(
                messages=messages,
                target=target,
                tools=tools,
                source=str(obj.get("source", "")),
                extra={k: v for k, v in obj.items() if k not in known},
            )
        )
    if not out:
        raise TrainingDataError(f"{path} holds no examples")
    return out


def write_examples(path: str | os.PathLike[str], examples: Iterable[TrainingExample]) -> str:
    """Writes JSONL (one example a line, stable key order); returns the file's sha256."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(example.to_json() + "\n" for example in examples)
    path.write_text(text, encoding="utf-8")
    return hashlib.sha256(text.encode()).hexdigest()


def file_sha256(path: str | os.PathLike[str]) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
