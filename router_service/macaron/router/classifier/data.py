"""Where the routing data lives and how its JSONL lines read.

The data ships with the package in `routing_data/` (train.jsonl, dev.jsonl and a README of
sources and licenses), so a clone with nothing beside it trains and tests. `MACARON_ROUTING_DATA`
or an explicit `--data-dir` points elsewhere (a newer copy, your own labelled traffic).
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
SHIPPED_DATA_DIR = Path(__file__).resolve().parent / "routing_data"


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
    """The routing data folder: `explicit`, else $MACARON_ROUTING_DATA, else the shipped copy."""
    given = explicit or os.environ.get(DATA_ENV)
    path = Path(given) if given else SHIPPED_DATA_DIR
    if (path / "train.jsonl").is_file():
        return path
    if not given:
        raise TrainingDataError(
            f"the shipped routing data is missing ({path}/train.jsonl): the installation is incomplete; "
            f"reinstall the project, or set ${DATA_ENV} (or pass --data-dir) to a folder holding train.jsonl"
        )
    raise TrainingDataError(
        f"routing data folder {path} has no train.jsonl; point --data-dir or ${DATA_ENV} at the folder "
        "holding train.jsonl and dev.jsonl"
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
