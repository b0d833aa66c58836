"""Fixtures of the specialist classifier's tests: the routing data and the shipped artifact."""

from __future__ import annotations

from pathlib import Path

import pytest

from macaron.router.classifier.data import Example, find_data_dir, load_jsonl


@pytest.fixture(scope="session")
def routing_data_dir() -> Path:
    """The routing data shipped with the package (or $MACARON_ROUTING_DATA)."""
    return find_data_dir()


@pytest.fixture(scope="session")
def train_examples(routing_data_dir: Path) -> list[Example]:
    return load_jsonl(routing_data_dir / "train.jsonl")


@pytest.fixture(scope="session")
def dev_examples(routing_data_dir: Path) -> list[Example]:
    return load_jsonl(routing_data_dir / "dev.jsonl")


@pytest.fixture(scope="session")
def fast_classifier():
    """The shipped artifact, fast path only (no embedding model load)."""
    from macaron.router.classifier import ClassifierSettings, SpecialistClassifier

    return SpecialistClassifier.load(ClassifierSettings(escalation=False))


def subset(examples: list[Example], every: int, offset: int = 0) -> list[Example]:
    """A deterministic, class- and source-spread subset: every `every`-th example."""
    return examples[offset::every]
