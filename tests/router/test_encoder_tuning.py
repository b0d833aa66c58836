"""The routing-tuned encoder: a tiny LoRA fit is deterministic, the adapter file round-trips and,
merged into the wheel's MiniLM at load, gives the embeddings training saw; an artifact whose
adapter is missing or replaced loads with escalation off (the fast path answers), and a broken
adapter makes the embedder unavailable instead of giving wrong embeddings."""

from __future__ import annotations

import numpy as np
import pytest

from macaron.router.classifier import encoder_tuning
from macaron.router.classifier.data import LABELS
from macaron.router.classifier.decision import SpecialistClassifier
from macaron.router.classifier.escalation import Embedder, EmbedderUnavailable
from macaron.router.classifier.model import Artifact, EmbeddingHead, adapter_path_for
from macaron.router.classifier.settings import ClassifierSettings
from macaron.router.classifier.train import TrainConfig, train

from .conftest import subset

TEXTS = [
    "list the files in this folder sorted by size", "find all python files modified today",
    "write a function that reverses a linked list", "fix the null pointer in my java parser",
    "book a table for two at eight tonight", "what's the weather in lisbon tomorrow",
    "set an alarm for six thirty", "play some jazz in the kitchen",
    "tell me a joke about cats", "how was your weekend?",
    "what is the capital of peru", "explain why the sky is blue",
    "make a landing page with a pricing table", "add a dark-mode toggle to the settings page",
    "build a responsive navbar with a burger menu", "style the signup form like a card",
]
LABELS_OF = [2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0, 3, 3, 3, 3]
TINY = encoder_tuning.TuneConfig(epochs=1, batch_size=8, max_tokens=16, rank=4)


@pytest.fixture(scope="module")
def lower() -> encoder_tuning.LowerStates:
    return encoder_tuning.LowerStates(TEXTS, TINY)


@pytest.fixture(scope="module")
def adapter(lower) -> encoder_tuning.Adapter:
    rows = np.arange(len(TEXTS))
    return encoder_tuning.fit(lower, rows, np.array(LABELS_OF), np.ones(len(TEXTS)), len(LABELS), TINY)


def test_fit_is_deterministic_and_small(lower, adapter, tmp_path) -> None:
    again = encoder_tuning.fit(lower, np.arange(len(TEXTS)), np.array(LABELS_OF), np.ones(len(TEXTS)),
                               len(LABELS), TINY)
    assert again.digest() == adapter.digest()
    np.testing.assert_array_equal(again.head_weights, adapter.head_weights)
    # LoRA only on the top layers' attention and feed-forward modules.
    assert adapter.tensors and all(".layer.4." in k or ".layer.5." in k for k in adapter.tensors)
    assert any(np.abs(v).sum() > 0 for k, v in adapter.tensors.items() if "lora_B" in k)  # it trained
    path = encoder_tuning.save_adapter(adapter, tmp_path / "a.safetensors")
    assert path.stat().st_size < 5 * 2**20
    tensors, config = encoder_tuning.load_adapter_tensors(path)
    assert config == TINY
    assert set(tensors) == set(adapter.tensors)
    for k, v in tensors.items():
        np.testing.assert_array_equal(v, adapter.tensors[k])  # stored in float16, rounded at fit time


def test_merged_adapter_gives_the_training_embeddings(lower, adapter, tmp_path) -> None:
    trained = encoder_tuning.embed_rows(lower, np.arange(len(TEXTS)), adapter)
    path = encoder_tuning.save_adapter(adapter, tmp_path / "a.safetensors")
    tuned = Embedder(adapter=path).encode(TEXTS)
    frozen = Embedder().encode(TEXTS)
    np.testing.assert_allclose(tuned, trained, atol=2e-3)  # float16 lower states in training
    assert np.abs(frozen - trained).max() > 10 * np.abs(tuned - trained).max()


def test_broken_adapter_makes_the_embedder_unavailable(tmp_path) -> None:
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(EmbedderUnavailable):
        Embedder(adapter=bad).encode(["hello"])


def _artifact_with_adapter(train_examples, adapter) -> Artifact:
    artifact = train(config=TrainConfig(escalation=False, holdout=False, multiturn=False),
                     train_examples=subset(train_examples, every=20))
    artifact.embedding = EmbeddingHead(weights=adapter.head_weights, bias=adapter.head_bias)
    artifact.escalation_threshold = 1.0  # every request escalates
    artifact.adapter = adapter
    return artifact


def test_artifact_ships_the_adapter_and_escalates_through_it(train_examples, adapter, tmp_path) -> None:
    path = _artifact_with_adapter(train_examples, adapter).save(tmp_path / "clf.joblib")
    assert adapter_path_for(path).is_file()
    loaded = Artifact.load(path)
    assert loaded.embedding is not None and loaded.adapter_path == adapter_path_for(path)
    clf = SpecialistClassifier(loaded, ClassifierSettings(wait_for_embedder_s=120))
    decision = clf.classify("write a function that reverses a linked list")
    assert decision.escalated is True


@pytest.mark.parametrize("damage", ["missing", "replaced"])
def test_missing_or_replaced_adapter_falls_back_to_the_fast_path(train_examples, adapter, tmp_path, damage,
                                                                 caplog) -> None:
    path = _artifact_with_adapter(train_examples, adapter).save(tmp_path / "clf.joblib")
    if damage == "missing":
        adapter_path_for(path).unlink()
    else:
        other = encoder_tuning.Adapter(tensors={k: v * 0 for k, v in adapter.tensors.items()},
                                       head_weights=adapter.head_weights, head_bias=adapter.head_bias, config=TINY)
        encoder_tuning.save_adapter(other, adapter_path_for(path))
    with caplog.at_level("WARNING"):
        loaded = Artifact.load(path)
    assert loaded.embedding is None
    assert "escalation is off" in caplog.text
    clf = SpecialistClassifier(loaded, ClassifierSettings(wait_for_embedder_s=120))
    assert not clf.escalation_enabled
    decision = clf.classify("write a function that reverses a linked list")
    assert decision.escalated is False and decision.specialist in LABELS
