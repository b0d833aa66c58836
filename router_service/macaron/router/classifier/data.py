"""Where the routing data lives and how its JSONL lines read.

The data sits in `shared/data/routing/` beside the repository (`<repo>/../shared/...`, the
same in CI). `MACARON_ROUTING_DATA` or an explicit `--data-dir` overrides the search.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from macaron.router.classifier.errors import TrainingDataError

LABELS: tuple[str, ...] = ("chat", "agent", "code", "ui")
DATA_ENV = "MACARON_ROUTING_DATA"
_RELATIVE = Path("shared") / "data" / "routing"


@dataclass(frozen=True, slots=True)
class Example:
    """One labelled request: a text or an OpenAI-style message list."""

    label: str
    text: str | None = None
    messages: list[dict[str, Any]] | None = None
    tools: list[Any] | None = None
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def repository(self) -> str:
        """The source repository: the part of `source` before ':'."""
        return self.source.split(":", 1)[0]


def find_data_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The routing data folder: `explicit`, else $MACARON_ROUTING_DATA, else ../shared/data/routing
    found by walking up from the current directory and from this module's file."""
    candidates: list[Path] = []
    given = explicit or os.environ.get(DATA_ENV)
    if given:
        path = Path(given)
        if (path / "train.jsonl").is_file():
            return path
        raise TrainingDataError(
            f"routing data folder {path} has no train.jsonl; point --data-dir or ${DATA_ENV} at the folder "
            "holding train.jsonl and dev.jsonl"
        )
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        for parent in (start, *start.parents):
            candidates.append(parent / _RELATIVE)
            candidates.append(parent.parent / _RELATIVE)
    for candidate in candidates:
        if (candidate / "train.jsonl").is_file():
            return candidate
    raise TrainingDataError(
        "routing data not found: looked for shared/data/routing/train.jsonl beside the repository "
        f"(and above the current directory). Put a copy of shared/ next to the clone, or set ${DATA_ENV} "
        "(or pass --data-dir) to the folder holding train.jsonl and dev.jsonl"
    )


def parse_line(obj: Any, where: str) -> Example:
    if not isinstance(obj, dict):
        raise TrainingDataError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    label = obj.get("label")
    if label not in LABELS:
        raise TrainingDataError(f"{where}: label must be one of {', '.join(LABELS)}, got {label!r}")
    text, messages = obj.get("text"), obj.get("messages")
    if text is None and messages is None:
        raise TrainingDataError(f"{where}: needs `text` or `messages`")
    known = {"text", "label", "messages", "tools", "source"}
    return Example(
        label=label,
        text=text,
        messages=messages if text is None else None,
        tools=obj.get("tools"),
        source=str(obj.get("source", "")),
        extra={k: v for k, v in obj.items() if k not in known},
    )


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[Example]:
    """The examples of a `{"text"|"messages", "label"}` JSONL file (other fields are kept in `extra`)."""
    path = Path(path)
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        raise TrainingDataError(f"{path} does not exist") from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            where = f"{path}:{number}"
            try:
                obj = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise TrainingDataError(f"{where}: not valid UTF-8 (byte offset {exc.start})") from None
            except json.JSONDecodeError as exc:
                raise TrainingDataError(f"{where}: not valid JSON ({exc.msg})") from None
            yield parse_line(obj, where)


def load_jsonl(path: str | os.PathLike[str]) -> list[Example]:
    return list(iter_jsonl(path))


def load_split(split: str, data_dir: str | os.PathLike[str] | None = None) -> list[Example]:
    """`train` or `dev` of the routing data."""
    return load_jsonl(find_data_dir(data_dir) / f"{split}.jsonl")
