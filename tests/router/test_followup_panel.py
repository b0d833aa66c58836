"""The written follow-up panel (followup_panel.py) is what its builder writes, and reads as multi-turn check data."""

from __future__ import annotations

from collections import Counter

from macaron.router.classifier import followup_panel
from macaron.router.classifier.data import LABELS, load_jsonl


def test_the_shipped_panel_is_what_the_builder_writes(routing_data_dir) -> None:
    shipped = (routing_data_dir / followup_panel.FILE_NAME).read_text(encoding="utf-8")
    assert shipped == followup_panel.render(), (
        "routing_data/followup_panel.jsonl is stale: run `python -m macaron.router.classifier.followup_panel`")


def test_the_panel_holds_every_session_and_both_kinds(routing_data_dir) -> None:
    examples = load_jsonl(routing_data_dir / followup_panel.FILE_NAME)
    kinds = Counter(e.extra["kind"] for e in examples)
    assert kinds == {"stay": 8 * 20, "switch": 24 * 3}
    for e in examples:
        assert e.messages is not None and e.messages[-1]["role"] == "user" and e.messages[1]["content"]
        assert e.extra["session"] in LABELS and e.label in LABELS
        assert (e.label == e.extra["session"]) == (e.extra["kind"] == "stay")
    assert Counter(e.extra["session"] for e in examples if e.extra["kind"] == "switch") == {s: 18 for s in LABELS}
