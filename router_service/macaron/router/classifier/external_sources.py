"""External check sets: public prompts of sources the router never trains on (routing_data/external*.jsonl).

Why: the source hold-out of `macaron router train` holds out one training repository at a time, so
every figure it gives comes from the sources the data was built from. A set from a source that no
split reads is the only check that a change of data or model still generalises; the tests hold the
shipped artifact to a floor on it, and a test fails if any of its texts ever reaches train or dev.

    # check out each repository of EXTERNAL at its commit into ROOT/<owner>/<name>, then
    python -m macaron.router.classifier.external_sources --root ROOT [--data-dir DIR]

Labels follow routing_data/README.md; items whose specialist is unclear are left out, and texts
train.jsonl or dev.jsonl already hold are dropped. external_multiturn.jsonl holds conversations built from
the same sources (see `conversations`). Running it again rewrites both files.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from macaron.router.classifier.public_sources import run_builder

EXTERNAL_FILE = "external.jsonl"
EXTERNAL_MULTITURN_FILE = "external_multiturn.jsonl"


@dataclass(frozen=True, slots=True)
class ExternalSource:
    repository: str
    commit: str
    license: str
    path: str  # a file, or a folder the reader walks
    reader: Callable[[Path], Iterator[tuple[str, str]]]  # what is at `path` -> (text, label)


# WizardLM's test set: 218 instructions in 29 skills. Writing code, fixing it and questions on code a
# user pasted are `code`; maths, writing, reasoning, knowledge and role play are `chat`. "Computer
# Science" mixes both, so each of its 15 is read: the ones that ask for code are `code`, the ones that
# ask for an explanation of a concept `chat`, and 4 that could go either way are left out.
_WIZARDLM_CODE_SKILLS = frozenset({"Code Generation", "Code Debug", "Complex Format"})
_WIZARDLM_CS_CODE = frozenset({57, 58, 59, 61, 63, 64, 65})  # OOP with code examples, FizzBuzz, sorting in C++, ...
_WIZARDLM_CS_UNCLEAR = frozenset({60, 62, 66, 70})  # stack vs queue, compiler vs interpreter, plain-text passwords, RLHF
_WIZARDLM_FORMAT_CHAT = frozenset({87})  # "Complex Format", but a right triangle's legs


def wizardlm_testset(path: Path) -> Iterator[tuple[str, str]]:
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        item = json.loads(line)
        idx, skill, text = int(item["idx"]), item["Skill"], item["Instruction"].strip()
        if skill == "Computer Science":
            if idx in _WIZARDLM_CS_UNCLEAR:
                continue
            yield text, "code" if idx in _WIZARDLM_CS_CODE else "chat"
        elif skill in _WIZARDLM_CODE_SKILLS and idx not in _WIZARDLM_FORMAT_CHAT:
            yield text, "code"
        else:
            yield text, "chat"


# TaskBench's daily-life requests (4,320, written for a tool graph of 40 personal-assistant APIs: bookings,
# bills, messages, calls, music, deliveries): every one asks the assistant to act, so `agent`. A fixed
# sample (by a hash of the id, so it does not move when the file grows) keeps the set balanced.
TASKBENCH_SAMPLE = 250


def taskbench_daily_life(path: Path) -> Iterator[tuple[str, str]]:
    items = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    items.sort(key=lambda item: hashlib.sha256(str(item["id"]).encode()).hexdigest())
    for item in items[:TASKBENCH_SAMPLE]:
        yield item["user_request"].strip(), "agent"


def restbench_spotify(path: Path) -> Iterator[tuple[str, str]]:
    """RestBench's Spotify queries: play, queue, follow, playlists, the user's own library: `agent`."""
    for item in json.loads(path.read_text(encoding="utf-8")):
        yield item["query"].strip(), "agent"


# Tasks whose later turns also act through tools ("send the assignments only if the plan validates"): their
# opening request asks for an interface (`ui`), but a later turn may be an agent's action, so none is a `stay`.
_EVOGENUI_ACTION_SUBSETS = frozenset({"tool_grounded_action_ui_50"})


def evogenui_turns(folder: Path) -> Iterator[tuple[str, list[str]]]:
    """EvoGenUI-Bench's tasks as (subset, user turns): each builds, then revises, one interface."""
    for task in sorted(folder.rglob("*.json")):
        item = json.loads(task.read_text(encoding="utf-8"))
        turns = [t["prompt"].strip() for t in sorted(item.get("turns", []), key=lambda t: t["turn"])]
        if turns:
            yield task.parent.name, turns


def evogenui_first_turns(folder: Path) -> Iterator[tuple[str, str]]:
    """The opening request of each task asks for a page, dashboard, planner or interactive tool: `ui`."""
    for _, turns in evogenui_turns(folder):
        yield turns[0], "ui"


EXTERNAL: tuple[ExternalSource, ...] = (
    ExternalSource("nlpxucan/WizardLM", "cd4b4cc022b6426aee62d51f7ae99a4a6ec9aaef",
                   "CC BY-NC 4.0 (WizardLM DATA_LICENSE)", "WizardLM/data/WizardLM_testset.jsonl", wizardlm_testset),
    ExternalSource("microsoft/JARVIS", "3c29e382877e1b7f792ac1212ba8d1e68a3f1c16", "MIT",
                   "taskbench/data_dailylifeapis/user_requests.json", taskbench_daily_life),
    ExternalSource("Yifan-Song793/RestGPT", "d99012860cb45323975bf5780152d7aa44f390f5", "MIT",
                   "datasets/spotify.json", restbench_spotify),
    ExternalSource("MAPS-research/EvoGenUI-Bench", "5e2eb00a041e7fdf8e188049394de0a5d8d9a3f3", "MIT",
                   "bench", evogenui_first_turns),
)


def normalise(text: str) -> str:
    """The key two copies of one prompt share: lower case, whitespace runs as one space."""
    return " ".join(text.lower().split())


def training_texts(data_dir: Path) -> set[str]:
    """Normalised texts of train.jsonl and dev.jsonl."""
    return {normalise(json.loads(line)["text"]) for split in ("train", "dev")
            for line in (data_dir / f"{split}.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()}


def rows(root: Path, known: set[str], sources: tuple[ExternalSource, ...] = EXTERNAL) -> list[dict[str, Any]]:
    """The external lines of every source found under `root`, without texts in `known` or repeated."""
    seen = set(known)
    found = []
    for source in sources:
        path = root / source.repository / source.path
        if not path.exists():
            continue
        for text, label in source.reader(path):
            if normalise(text) in seen:
                continue
            seen.add(normalise(text))
            found.append({"text": text, "label": label, "source": f"{source.repository}:{source.path}",
                          "license": source.license})
    return found


_EVOGENUI = "MAPS-research/EvoGenUI-Bench"


def conversations(root: Path, singles: list[dict[str, Any]], known: set[str], seed: int = 0) -> list[dict[str, Any]]:
    """Multi-turn lines in the shape of multiturn_dev.jsonl (user turns only, `session`, `kind`).

    `stay`: every later turn of an EvoGenUI-Bench task (the user revising the interface the session's `ui`
    specialist built), but for the tasks whose later turns also act through tools. `switch`: a task's opening
    request as the history, then an external request of another specialist; and an external `agent`, `chat`
    or `code` request as the history, then a task's opening request. Every text is external; none is in
    `known` (train and dev)."""
    source = next(s for s in EXTERNAL if s.repository == _EVOGENUI)
    folder = root / source.repository / source.path
    if not folder.exists():
        return []
    tasks, revised, firsts = [], [], set()
    for subset, turns in evogenui_turns(folder):
        if normalise(turns[0]) not in firsts and not any(normalise(t) in known for t in turns):
            firsts.add(normalise(turns[0]))
            tasks.append(turns)
            if subset not in _EVOGENUI_ACTION_SUBSETS:
                revised.append(turns)
    evo = {"source": f"{source.repository}:{source.path}", "license": source.license}
    lines = [{"messages": [{"role": "user", "content": t} for t in turns[:k]], "label": "ui", "session": "ui",
              "kind": "stay", **evo} for turns in revised for k in range(2, len(turns) + 1)]
    others = [r for r in singles if r["label"] != "ui"]
    rng = random.Random(seed)
    for turns, other in zip(tasks, rng.sample(others, min(len(tasks), len(others)))):
        lines.append({"messages": [{"role": "user", "content": turns[0]}, {"role": "user", "content": other["text"]}],
                      "label": other["label"], "session": "ui", "kind": "switch", "source": other["source"],
                      "license": other["license"], "history_source": evo["source"]})
    for other, turns in zip(rng.sample(others, min(len(tasks), len(others))), rng.sample(tasks, len(tasks))):
        lines.append({"messages": [{"role": "user", "content": other["text"]}, {"role": "user", "content": turns[0]}],
                      "label": "ui", "session": other["label"], "kind": "switch", **evo,
                      "history_source": other["source"]})
    return lines


def _write_jsonl(path: Path, lines: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines), encoding="utf-8")


def write(data_dir: Path, root: Path) -> dict[str, Any]:
    known = training_texts(data_dir)
    lines = rows(root, known)
    _write_jsonl(data_dir / EXTERNAL_FILE, lines)
    turns = conversations(root, lines, known)
    _write_jsonl(data_dir / EXTERNAL_MULTITURN_FILE, turns)
    counts: dict[str, Any] = {}
    for r in lines:
        counts[r["label"]] = counts.get(r["label"], 0) + 1
    kinds: dict[str, int] = {}
    for r in turns:
        kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
    return {**counts, "multiturn": kinds}


def main(argv: list[str] | None = None) -> int:
    return run_builder(write, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    raise SystemExit(main())
