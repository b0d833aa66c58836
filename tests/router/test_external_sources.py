"""External check sets: how the reader labels WizardLM's test set, that a text train or dev holds is
dropped, and that the shipped external.jsonl shares no text with train.jsonl or dev.jsonl (a set the
router trains on would check nothing)."""

from __future__ import annotations

import json
from pathlib import Path

from macaron.router.classifier import external_sources as es


def _wizardlm(root: Path) -> None:
    folder = root / "nlpxucan" / "WizardLM" / "WizardLM" / "data"
    folder.mkdir(parents=True)
    items = [
        (1, "Math", "What is the value of 2+2?"),
        (20, "Code Generation", "Given an array of integers, find the longest increasing subarray in Python."),
        (56, "Computer Science", "Identify some of the main components of a computer network."),
        (59, "Computer Science", "Write a Matlab program that prints the numbers from 1 to 100."),
        (60, "Computer Science", "What is the difference between a stack and a queue?"),
        (84, "Complex Format", "How can I use SQL to return the last record in each group of a table?"),
        (87, "Complex Format", "Given that the hypotenuse of a right triangle is 13, find the legs."),
        (96, "Code Debug", "What is wrong with this C++ code that is supposed to swap two numbers?"),
        (135, "Roleplay", "As a sports commentator, describe the winning play of a championship game"),
        (136, "Roleplay", "As  a sports commentator, describe the winning play of a championship game"),
    ]
    (folder / "WizardLM_testset.jsonl").write_text(
        "".join(json.dumps({"idx": i, "Skill": s, "Difficulty": 3, "Instruction": t}) + "\n" for i, s, t in items),
        encoding="utf-8")


def test_wizardlm_labels_and_what_is_left_out(tmp_path: Path) -> None:
    _wizardlm(tmp_path)
    known = {es.normalise("What is the value of 2+2?")}
    got = {r["text"]: r["label"] for r in es.rows(tmp_path, known)}
    assert got == {
        "Given an array of integers, find the longest increasing subarray in Python.": "code",
        "Identify some of the main components of a computer network.": "chat",
        "Write a Matlab program that prints the numbers from 1 to 100.": "code",
        "How can I use SQL to return the last record in each group of a table?": "code",
        "Given that the hypotenuse of a right triangle is 13, find the legs.": "chat",
        "What is wrong with this C++ code that is supposed to swap two numbers?": "code",
        "As a sports commentator, describe the winning play of a championship game": "chat",
    }  # 2+2 is known to training, the stack/queue question is unclear, the second commentator a repeat


def test_write_drops_texts_training_holds(tmp_path: Path) -> None:
    _wizardlm(tmp_path / "root")
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text(json.dumps({"text": "what is the VALUE of 2+2?", "label": "chat"}) + "\n")
    (data / "dev.jsonl").write_text("")
    counts = es.write(data, tmp_path / "root")
    lines = [json.loads(x) for x in (data / es.EXTERNAL_FILE).read_text().splitlines()]
    assert counts == {"code": 4, "chat": 3} and len(lines) == 7
    assert all(line["source"].startswith("nlpxucan/WizardLM:") and line["license"] for line in lines)


def test_shipped_external_set_is_never_trained_on(routing_data_dir: Path) -> None:
    external = [json.loads(x) for x in (routing_data_dir / es.EXTERNAL_FILE).read_text().splitlines() if x]
    assert len(external) >= 200
    assert {e["label"] for e in external} <= {"chat", "agent", "code", "ui"}
    trained = es.training_texts(routing_data_dir)
    shared = [e["text"] for e in external if es.normalise(e["text"]) in trained]
    assert not shared, f"external texts in train/dev: {shared[:3]}"
