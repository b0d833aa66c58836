"""Hand labels applied in place to lines that have no reader to re-run (relabel.py)."""

from __future__ import annotations

import json
from pathlib import Path

from macaron.router.classifier import public_sources as ps
from macaron.router.classifier import relabel


def _line(text: str, label: str, source: str) -> str:
    return json.dumps({"text": text, "label": label, "source": source, "license": "Apache-2.0"})


def test_relabel_applies_hand_labels_drops_the_left_out_and_is_idempotent(tmp_path: Path, monkeypatch) -> None:
    java = "ShishirPatil/gorilla:berkeley-function-call-leaderboard/bfcl_eval/data/BFCL_v4_simple_java.json"
    (tmp_path / "train.jsonl").write_text("\n".join([
        _line("Help me initialize the DES cipher in Java with 'DESede' and 'CBC' mode?", "agent", java),
        _line("Help me change the visibility of product categories 101 and 102 to hidden?", "agent", java),
        _line("Find me a sushi restaurant in Boston.", "agent", java),  # no hand label: left as it is
        _line("Help me initialize the DES cipher in Java with 'DESede' and 'CBC' mode?", "agent", "other/repo:x.json"),
    ]) + "\n", encoding="utf-8")
    (tmp_path / "dev.jsonl").write_text(_line("Help me reset a state property to null in a React component?", "agent",
                                              java) + "\n", encoding="utf-8")
    labels = tmp_path / "hand_labels"
    labels.mkdir()
    (labels / "gorilla.jsonl").write_text("".join(json.dumps({"path": "x", "sha256_16": ps.text_digest(t), "label": y}) + "\n"
                                                  for t, y in [
        ("Help me initialize the DES cipher in Java with 'DESede' and 'CBC' mode?", "code"),
        ("Help me change the visibility of product categories 101 and 102 to hidden?", None),
        ("Help me reset a state property to null in a React component?", "code")]), encoding="utf-8")
    monkeypatch.setattr(ps, "HAND_LABELS_DIR", labels)
    assert relabel.relabel(tmp_path) == {"relabelled": 2, "dropped": 1}
    train = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(r["text"][:22], r["label"]) for r in train] == [
        ("Help me initialize the", "code"), ("Find me a sushi restau", "agent"),
        ("Help me initialize the", "agent")]  # another repository's line keeps its label
    assert json.loads((tmp_path / "dev.jsonl").read_text(encoding="utf-8"))["label"] == "code"
    before = (tmp_path / "train.jsonl").read_text(encoding="utf-8")
    assert relabel.relabel(tmp_path) == {"relabelled": 0, "dropped": 0}
    assert (tmp_path / "train.jsonl").read_text(encoding="utf-8") == before


def test_the_shipped_data_carries_its_hand_labels() -> None:
    data_dir = Path(ps.__file__).resolve().parent / "routing_data"
    lines = [json.loads(line) for split in ("train", "dev")
             for line in (data_dir / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()]
    for name, repository in relabel.RELABELLED.items():
        labels = ps.hand_labels(name)
        assert labels
        mine = [line for line in lines if line["source"].startswith(repository + ":")]
        labelled = [line for line in mine if ps.text_digest(line["text"]) in labels]
        assert labelled and all(labels[ps.text_digest(line["text"])] == line["label"] for line in labelled)
