"""Routing data from packages: what is read, labels, deduplication, and a rerun that changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

from macaron.router.classifier.package_sources import merge, rows


def _packages(tmp_path: Path) -> tuple[Path, Path]:
    english = tmp_path / "cb" / "chatterbot_corpus" / "data" / "english"
    english.mkdir(parents=True)
    (english / "coding.yml").write_text(
        "categories: [coding]\nconversations:\n- - can you write bubble sort?\n  - Sure.\n", encoding="utf-8")
    (english / "sports.yml").write_text(
        "conversations:\n- - WHAT IS BASKETBALL\n  - A game.\n- - hello\n  - hi\n", encoding="utf-8")
    examples = tmp_path / "eg" / "eg" / "examples"
    examples.mkdir(parents=True)
    (examples / "tar.md").write_text(
        "# tar\n\nCompress directory (`c`) into a g-zipped archive:\n\n    tar czf a.tgz dir\n\n"
        "x\n\n    tar x\n\n## Extract\n\nThis explains a lot. It has two sentences and is not a request at all:\n\n"
        "    tar xzf a.tgz\n", encoding="utf-8")
    return tmp_path / "cb", tmp_path / "eg"


def test_rows_labels_and_filters(tmp_path: Path) -> None:
    found = rows(*_packages(tmp_path))
    texts = {r["text"]: (r["label"], r["source"], r["license"]) for r in found}
    assert texts["can you write bubble sort?"] == ("code", "chatterbot-corpus:chatterbot_corpus/data/english/coding.yml",
                                                   "BSD-3-Clause")
    assert texts["What is basketball"][0] == "chat"  # all capitals made readable
    assert texts["Compress directory into a g-zipped archive"] == ("code", "eg:eg/examples/tar.md", "MIT")
    assert "x" not in texts and not any(t.startswith("This explains") for t in texts)


def test_merge_dedupes_and_is_idempotent(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    existing = {"text": "Hello", "label": "chat", "source": "other/repo:f.json", "license": "MIT"}
    (data / "train.jsonl").write_text(json.dumps(existing) + "\n", encoding="utf-8")
    (data / "dev.jsonl").write_text("", encoding="utf-8")
    new = rows(*_packages(tmp_path))
    first = merge(data, new)
    assert first["train"] + first["dev"] == len(new) - 1  # "hello" is already there
    snapshot = [(data / f"{s}.jsonl").read_text(encoding="utf-8") for s in ("train", "dev")]
    assert merge(data, new) == first
    assert [(data / f"{s}.jsonl").read_text(encoding="utf-8") for s in ("train", "dev")] == snapshot


def test_other_languages_come_after_the_english_lines_and_are_capped(tmp_path: Path) -> None:
    import macaron.router.classifier.package_sources as package_sources

    chatterbot, eg = _packages(tmp_path)
    english = rows(chatterbot, eg)
    russian = chatterbot / "chatterbot_corpus" / "data" / "russian"
    russian.mkdir(parents=True)
    openings = "".join(f"- - Привет {i}!\n  - Привет\n" for i in range(package_sources.PER_LANGUAGE + 5))
    (russian / "conversations.yml").write_text("conversations:\n" + openings + "- - привет 0!\n  - да\n", encoding="utf-8")
    found = rows(chatterbot, eg)
    assert found[: len(english)] == english  # the English lines (and so their splits) as they were
    added = found[len(english):]
    assert len(added) == package_sources.PER_LANGUAGE  # capped, and "привет 0!" counted once
    assert {(r["label"], r["source"]) for r in added} == {
        ("chat", "chatterbot-corpus:chatterbot_corpus/data/russian/conversations.yml")}
