"""External check sets: public prompts no split of the routing data reads (routing_data/external*.jsonl).

Why: the source hold-out of `macaron router train` holds out one training repository at a time, so
every figure it gives comes from the sources the data was built from. A set from a source that no
split reads is the only check that a change of data or model still generalises; the tests hold the
shipped artifact to a floor on it, and a test fails if any of its texts ever reaches what training reads.

    # check out each repository of EXTERNAL at its commit into ROOT/<owner>/<name>, then
    python -m macaron.router.classifier.external_sources --root ROOT [--data-dir DIR]

Labels follow routing_data/README.md; items whose specialist is unclear are left out, and texts
training reads (`training_texts`) are dropped. One source is a benchmark whose interactive subset trains
the router (EvoGenUI-Bench: its other two subsets are here); no split reads any other repository here.
external_multiturn.jsonl holds conversations built from the same sources (see `conversations`).
external_real_users.jsonl holds real users' requests (`REAL_USERS`: Arena-Hard-Auto's, labelled by hand),
scored apart. Running it again rewrites each set whose repositories are under ROOT.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from macaron.router.classifier.public_sources import (
    ARENA_HARD,
    ARENA_HARD_FILE,
    ARENA_HARD_V01_FILE,
    EVOGENUI_TASKS_DIR,
    arena_hard_file,
    evogenui_subset,
    run_builder,
)

EXTERNAL_FILE = "external.jsonl"
EXTERNAL_MULTITURN_FILE = "external_multiturn.jsonl"
EXTERNAL_REAL_USERS_FILE = "external_real_users.jsonl"


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


# EvoGenUI-Bench's presentation and tool-grounded tasks: each opens with a request for a one-page board or
# briefing, or for a case workspace or console over the user's data (`ui`). Its interactive tasks train the
# router (public_sources.py); these two subsets no split reads. The presentation tasks' later turns revise
# the page ("Reframe the same artifact for the incident commander") and are the `stay` lines; the
# tool-grounded tasks' later turns also act through tools ("send the assignments only if the plan
# validates"), so none of them is a `stay`: it may be an agent's action, not a revision of the screen.
EVOGENUI_REVISED_SUBSET = "presentation_ui_50"
EVOGENUI_EXTERNAL_SUBSETS = (EVOGENUI_REVISED_SUBSET, "tool_grounded_action_ui_50")


def evogenui_external_tasks(folder: Path) -> Iterator[tuple[str, list[str]]]:
    """(subset, user turns) of each task of the subsets training never reads."""
    for subset in EVOGENUI_EXTERNAL_SUBSETS:
        for _, turns in evogenui_subset(folder / subset):
            yield subset, turns


def evogenui_first_turns(folder: Path) -> Iterator[tuple[str, str]]:
    """The opening request of each task: `ui`."""
    for _, turns in evogenui_external_tasks(folder):
        yield turns[0], "ui"


EXTERNAL: tuple[ExternalSource, ...] = (
    ExternalSource("nlpxucan/WizardLM", "cd4b4cc022b6426aee62d51f7ae99a4a6ec9aaef",
                   "CC BY-NC 4.0 (WizardLM DATA_LICENSE)", "WizardLM/data/WizardLM_testset.jsonl", wizardlm_testset),
    ExternalSource("microsoft/JARVIS", "3c29e382877e1b7f792ac1212ba8d1e68a3f1c16", "MIT",
                   "taskbench/data_dailylifeapis/user_requests.json", taskbench_daily_life),
    ExternalSource("Yifan-Song793/RestGPT", "d99012860cb45323975bf5780152d7aa44f390f5", "MIT",
                   "datasets/spotify.json", restbench_spotify),
    ExternalSource("MAPS-research/EvoGenUI-Bench", "5e2eb00a041e7fdf8e188049394de0a5d8d9a3f3", "MIT",
                   EVOGENUI_TASKS_DIR, evogenui_first_turns),
)
_EVOGENUI = next(s for s in EXTERNAL if s.reader is evogenui_first_turns)


def _arena_hard_requests(name: str) -> Callable[[Path], Iterator[tuple[str, str]]]:
    """The reader of one Arena-Hard-Auto question file (`name`, its path in the repository, picks its labels)."""
    def read(path: Path) -> Iterator[tuple[str, str]]:
        return ((row.text, row.label) for row in arena_hard_file(path, name))
    return read


# Real users' requests, kept apart from the benchmark-written sets above: people paste maths in LaTeX, write
# in their own language and mix domains, and a source hold-out over benchmark data overstated how the
# router reads them (0.903 held out against 0.835 on v2.0, routing_data/README.md). Both files are
# Chatbot Arena requests picked as hard by Arena-Hard-Auto, labelled by hand (hand_labels/arena_hard*.jsonl).
REAL_USERS: tuple[ExternalSource, ...] = tuple(
    ExternalSource(ARENA_HARD.repository, ARENA_HARD.commit, ARENA_HARD.license, name, _arena_hard_requests(name))
    for name in (ARENA_HARD_FILE, ARENA_HARD_V01_FILE)
)


def normalise(text: str) -> str:
    """The key two copies of one prompt share: lower case, whitespace runs as one space."""
    return " ".join(text.lower().split())


def training_texts(data_dir: Path) -> set[str]:
    """Normalised texts training reads: train.jsonl and dev.jsonl, and every turn of conversations.jsonl and
    of the multi-turn files (a public conversation's later turns are training data too)."""
    texts: set[str] = set()
    for name in ("train", "dev", "conversations", "multiturn_train", "multiturn_dev"):
        path = data_dir / f"{name}.jsonl"
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            if "text" in item:
                texts.add(normalise(item["text"]))
            texts.update(normalise(m["content"]) for m in item.get("messages") or item.get("conversation") or []
                         if m.get("role") == "user" and isinstance(m.get("content"), str))
    return texts


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


SWITCH_HISTORIES_PER_LABEL = 75


def conversations(root: Path, singles: list[dict[str, Any]], known: set[str], seed: int = 0) -> list[dict[str, Any]]:
    """Multi-turn lines in the shape of multiturn_dev.jsonl (user turns only, `session`, `kind`).

    `stay`: every later turn of an EvoGenUI-Bench presentation task, with the turns before it (the user
    revising the page the session's `ui` specialist built). `switch`: an external request of one specialist
    as the history (up to SWITCH_HISTORIES_PER_LABEL of each), then an external request of another (the
    other three in turn) as the new turn. Every text is external; none is in `known` (what training reads)."""
    lines: list[dict[str, Any]] = []
    folder = root / _EVOGENUI.repository / _EVOGENUI.path
    if folder.exists():
        evo = {"source": f"{_EVOGENUI.repository}:{_EVOGENUI.path}", "license": _EVOGENUI.license}
        for subset, turns in evogenui_external_tasks(folder):
            if subset == EVOGENUI_REVISED_SUBSET and not any(normalise(t) in known for t in turns):
                lines += [{"messages": [{"role": "user", "content": t} for t in turns[:k]], "label": "ui",
                           "session": "ui", "kind": "stay", **evo} for k in range(2, len(turns) + 1)]
    rng = random.Random(seed)
    by_label: dict[str, list[dict[str, Any]]] = {}
    for r in singles:
        by_label.setdefault(r["label"], []).append(r)
    for label in sorted(by_label):
        others = sorted(set(by_label) - {label})
        histories = by_label[label]
        if len(histories) > SWITCH_HISTORIES_PER_LABEL:
            histories = rng.sample(histories, SWITCH_HISTORIES_PER_LABEL)
        for i, history in enumerate(histories if others else []):
            new = rng.choice(by_label[others[i % len(others)]])
            lines.append({"messages": [{"role": "user", "content": history["text"]},
                                       {"role": "user", "content": new["text"]}],
                          "label": new["label"], "session": label, "kind": "switch", "source": new["source"],
                          "license": new["license"], "history_source": history["source"]})
    return lines


def _write_jsonl(path: Path, lines: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines), encoding="utf-8")


def _present(root: Path, sources: tuple[ExternalSource, ...]) -> bool:
    return any((root / s.repository / s.path).exists() for s in sources)


def _counts(lines: list[dict[str, Any]], key: str) -> dict[str, int]:
    return dict(Counter(r[key] for r in lines))


def write(data_dir: Path, root: Path) -> dict[str, Any]:
    """Rewrites each set whose sources are under `root` (external.jsonl with its conversations; the real
    users' set); a set none of whose sources is there is left as it is."""
    known = training_texts(data_dir)
    result: dict[str, Any] = {}
    if _present(root, EXTERNAL):
        lines = rows(root, known)
        _write_jsonl(data_dir / EXTERNAL_FILE, lines)
        turns = conversations(root, lines, known)
        _write_jsonl(data_dir / EXTERNAL_MULTITURN_FILE, turns)
        result.update(_counts(lines, "label"), multiturn=_counts(turns, "kind"))
    if _present(root, REAL_USERS):
        external = data_dir / EXTERNAL_FILE
        other = {normalise(json.loads(x)["text"]) for x in external.read_text(encoding="utf-8").splitlines()
                 if x.strip()} if external.exists() else set()
        real = rows(root, known | other, REAL_USERS)
        _write_jsonl(data_dir / EXTERNAL_REAL_USERS_FILE, real)
        result["real_users"] = _counts(real, "label")
    return result


def main(argv: list[str] | None = None) -> int:
    return run_builder(write, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    raise SystemExit(main())
