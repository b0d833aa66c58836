"""External check sets: public prompts of sources the router never trains on (routing_data/external.jsonl).

Why: the source hold-out of `macaron router train` holds out one training repository at a time, so
every figure it gives comes from the sources the data was built from. A set from a source that no
split reads is the only check that a change of data or model still generalises; the tests hold the
shipped artifact to a floor on it, and a test fails if any of its texts ever reaches train or dev.

    # check out each repository of EXTERNAL at its commit into ROOT/<owner>/<name>, then
    python -m macaron.router.classifier.external_sources --root ROOT [--data-dir DIR]

Labels follow routing_data/README.md; items whose specialist is unclear are left out, and texts
train.jsonl or dev.jsonl already hold are dropped. Running it again rewrites the file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from macaron.router.classifier.public_sources import run_builder

EXTERNAL_FILE = "external.jsonl"


@dataclass(frozen=True, slots=True)
class ExternalSource:
    repository: str
    commit: str
    license: str
    path: str
    reader: Callable[[Path], Iterator[tuple[str, str]]]  # the file at `path` -> (text, label)


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


EXTERNAL: tuple[ExternalSource, ...] = (
    ExternalSource("nlpxucan/WizardLM", "cd4b4cc022b6426aee62d51f7ae99a4a6ec9aaef",
                   "CC BY-NC 4.0 (WizardLM DATA_LICENSE)", "WizardLM/data/WizardLM_testset.jsonl", wizardlm_testset),
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
        if not path.is_file():
            continue
        for text, label in source.reader(path):
            if normalise(text) in seen:
                continue
            seen.add(normalise(text))
            found.append({"text": text, "label": label, "source": f"{source.repository}:{source.path}",
                          "license": source.license})
    return found


def write(data_dir: Path, root: Path) -> dict[str, int]:
    lines = rows(root, training_texts(data_dir))
    (data_dir / EXTERNAL_FILE).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines),
                                          encoding="utf-8")
    counts: dict[str, int] = {}
    for r in lines:
        counts[r["label"]] = counts.get(r["label"], 0) + 1
    return counts


def main(argv: list[str] | None = None) -> int:
    return run_builder(write, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    raise SystemExit(main())
