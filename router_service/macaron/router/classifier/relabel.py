"""Hand labels for lines that came into the routing data without a reader here, applied in place.

Why: some of the first sources' lines were labelled by the file they came from, and a file's label is not always
what the convention says (routing_data/README.md, top): BFCL's Java and JavaScript "function calls" ("Help me
create a MethodEntryRequest for a specific thread `mainThread` ...") are programming tasks, `code`, though the
benchmark is a function-calling one (`agent`). Those sources have no reader in public_sources.py to re-run, so
their corrected labels live in routing_data/hand_labels/<name>.jsonl (the file, the first 16 hex digits of the
text's SHA-256, the label; null: read and left out) and this module rewrites train/dev.jsonl from them:

    python -m macaron.router.classifier.relabel [--data-dir DIR]

A line of a relabelled file without a hand label is left as it is; running it again changes nothing.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from macaron.router.classifier.data import find_data_dir
from macaron.router.classifier.public_sources import hand_labels, text_digest

# hand-label file -> the repository whose lines it relabels (its `path` names the file inside the repository)
RELABELLED = {"gorilla": "ShishirPatil/gorilla"}


def relabel(data_dir: Path, relabelled: dict[str, str] = RELABELLED) -> dict[str, int]:
    """Applies every hand-label file of `relabelled` to train/dev.jsonl: counts of lines relabelled and dropped."""
    labels = {repository: hand_labels(name) for name, repository in relabelled.items()}
    counts = {"relabelled": 0, "dropped": 0}
    for split in ("train", "dev"):
        path = data_dir / f"{split}.jsonl"
        kept: list[str] = []
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            by_digest = labels.get(row["source"].split(":", 1)[0], {})
            digest = text_digest(row["text"])
            if digest in by_digest:
                label = by_digest[digest]
                if label is None:
                    counts["dropped"] += 1
                    continue
                if label != row["label"]:
                    counts["relabelled"] += 1
                    row["label"] = label
                    line = json.dumps(row, ensure_ascii=False)
            kept.append(line)
        path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="Routing data folder (default: the shipped one).")
    args = parser.parse_args(argv)
    print(json.dumps(relabel(find_data_dir(args.data_dir))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
