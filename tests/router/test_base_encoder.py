"""The base model as the second escalation encoder: what training reads from cached lower blocks is what the router
reads at run time from the cut model with the adapter merged in; the adapter travels beside the artifact and is
checked at load; a single request left unsure by fast path + MiniLM asks it, and the settings turn it off."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from macaron.router.classifier import base_encoder, encoder_tuning
from macaron.router.classifier.data import LABELS
from macaron.router.classifier.decision import SpecialistClassifier
from macaron.router.classifier.model import SHIPPED_ARTIFACT, Artifact, EmbeddingHead, SecondEncoder, base_adapter_path_for
from macaron.router.classifier.settings import ClassifierSettings

from .test_encoder_tuning import LABELS_OF, TEXTS

# A few blocks and tokens keep the test to seconds; the shipped config runs 16 blocks.
TINY = base_encoder.BaseTuneConfig(depth=4, top_layers=2, rank=4, max_tokens=16, epochs=1, batch_size=8)


@pytest.fixture(scope="module")
def model_dir(macaron_cache_dir: Path) -> Path:
    from macaron.assets.smollm2 import ensure_smollm2_model

    return Path(ensure_smollm2_model(macaron_cache_dir, progress=False).model_dir)


@pytest.fixture(scope="module")
def lower(model_dir: Path) -> base_encoder.LowerStates:
    return base_encoder.LowerStates(TEXTS, TINY, model_dir)


@pytest.fixture(scope="module")
def adapter(lower: base_encoder.LowerStates) -> encoder_tuning.Adapter:
    return base_encoder.fit(lower, np.arange(len(TEXTS)), np.array(LABELS_OF), np.ones(len(TEXTS)), len(LABELS))


def test_fit_trains_only_the_top_blocks_and_round_trips(lower, adapter, tmp_path) -> None:
    assert adapter.tensors and all(k.startswith(("layers.2.", "layers.3.")) for k in adapter.tensors)
    assert any(np.abs(v).sum() > 0 for k, v in adapter.tensors.items() if "lora_B" in k)  # it trained
    again = base_encoder.fit(lower, np.arange(len(TEXTS)), np.array(LABELS_OF), np.ones(len(TEXTS)), len(LABELS))
    assert again.digest() == adapter.digest()  # seeded
    path = encoder_tuning.save_adapter(adapter, tmp_path / "base.safetensors")
    tensors, config = encoder_tuning.load_adapter_tensors(path, base_encoder.BaseTuneConfig)
    assert config == TINY and set(tensors) == set(adapter.tensors)


def test_run_time_encoder_reads_what_training_read(lower, adapter, model_dir, tmp_path) -> None:
    """Cached lower blocks + the LoRA'd top blocks (training) and the whole cut model with the adapter merged
    (the router) give the same logits, from the saved file too."""
    trained = base_encoder.logits_of_rows(lower, np.arange(len(TEXTS)), adapter)
    path = encoder_tuning.save_adapter(adapter, tmp_path / "base.safetensors")
    embedder = base_encoder.BaseModelEmbedder(path, model_dir=model_dir)
    vectors = embedder.encode(TEXTS, batch_size=5)  # mixed lengths padded together
    assert vectors.shape == (len(TEXTS), 576)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    served = vectors @ adapter.head_weights + adapter.head_bias
    np.testing.assert_allclose(served, trained, atol=2e-3)
    alone = embedder.encode([TEXTS[3]], batch_size=1)[0]  # unpadded: the same vector
    np.testing.assert_allclose(alone, vectors[3], atol=1e-4)


def with_second(adapter: encoder_tuning.Adapter, below: float) -> Artifact:
    artifact = Artifact.load(SHIPPED_ARTIFACT)
    assert artifact.embedding is not None and artifact.adapter_path is not None
    tensors, config = encoder_tuning.load_adapter_tensors(artifact.adapter_path)  # saved again beside a copy
    artifact.adapter = encoder_tuning.Adapter(tensors=tensors, head_weights=artifact.embedding.weights,
                                              head_bias=artifact.embedding.bias, config=config)
    head = EmbeddingHead(weights=adapter.head_weights, bias=adapter.head_bias, temperature=1.0,
                         encoder=f"{base_encoder.ENCODER_LABEL}:{TINY.depth}")
    artifact.second = SecondEncoder(head=head, mean_temperature=1.0, below=below, adapter=adapter)
    return artifact


def test_artifact_carries_the_adapter_and_checks_it(adapter, tmp_path) -> None:
    path = with_second(adapter, 0.7).save(tmp_path / "clf.joblib")
    assert base_adapter_path_for(path).is_file()
    loaded = Artifact.load(path)
    assert loaded.second is not None and loaded.second.below == 0.7
    assert loaded.second.adapter_path == base_adapter_path_for(path)
    np.testing.assert_allclose(loaded.second.head.weights, adapter.head_weights, atol=1e-3)
    base_adapter_path_for(path).write_bytes(b"not the adapter")
    assert Artifact.load(path).second is None  # a replaced adapter: MiniLM alone, never a wrong reading


def test_unsure_single_request_asks_the_base_model(adapter, model_dir) -> None:
    artifact = with_second(adapter, below=1.01)  # every escalated single request asks it
    settings = ClassifierSettings(escalation_threshold=1.0, base_model_dir=str(model_dir))
    classifier = SpecialistClassifier(artifact, settings)
    assert classifier.wait_for_encoders(120)
    decision = classifier.classify("what's the weather like on mars")
    assert decision.escalated and decision.second_opinion
    assert abs(sum(decision.probabilities.values()) - 1.0) < 1e-6
    # Conversations keep the conversation decision's escalation (trained on MiniLM's probabilities).
    turn = classifier.classify(messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                                         {"role": "user", "content": "what's the weather like on mars"}])
    assert not turn.second_opinion
    off = SpecialistClassifier(artifact, settings.model_copy(update={"second_encoder": False}))
    off.wait_for_encoders(120)
    plain = off.classify("what's the weather like on mars")
    assert plain.escalated and not plain.second_opinion
    sure = SpecialistClassifier(with_second(adapter, below=0.0), settings)
    sure.wait_for_encoders(120)
    assert not sure.classify("what's the weather like on mars").second_opinion


def test_training_chooses_the_cascade_on_hold_out_and_reports_it(model_dir) -> None:
    """`macaron router train`'s step: fold logits of the base model, its threshold under the cap, the final fit."""
    from macaron.router.classifier.train import TrainConfig, _train_second_encoder

    rng = np.random.default_rng(0)
    y = np.array(LABELS_OF)
    repos = np.array([f"repo{i % 4}" for i in range(len(TEXTS))])
    p_fast = rng.dirichlet(np.ones(len(LABELS)), len(TEXTS))
    p_embed = rng.dirichlet(np.ones(len(LABELS)), len(TEXTS))
    config = TrainConfig(base_tune=TINY, encoder_folds=2, second_min_gain=-1.0, max_second_rate=1.0)
    report: dict = {"holdout": {}}
    second = _train_second_encoder(list(TEXTS), y, repos, np.ones(len(TEXTS)), repos, p_fast, p_embed, 1.01, 0.5,
                                   config, report, lambda _: None, model_dir)
    assert second is not None and second.adapter is not None and second.below in config.second_thresholds
    assert second.head.weights.shape == (576, len(LABELS)) and second.mean_temperature > 0
    entry = report["second_encoder"]
    assert entry["ships"] and [c["below"] for c in entry["curve"]] == list(config.second_thresholds)
    assert report["holdout"]["second_below"] == second.below and 0 <= report["holdout"]["second_rate"] <= 1
    shipped = next(c for c in entry["curve"] if c["below"] == second.below)  # the gain of what ships, not the best
    assert entry["gain"] == round(shipped["mean_accuracy"] - entry["without"]["mean_accuracy"], 4)
    strict = TrainConfig(base_tune=TINY, encoder_folds=2, second_min_gain=1.0)
    assert _train_second_encoder(list(TEXTS), y, repos, np.ones(len(TEXTS)), repos, p_fast, p_embed, 1.01, 0.5,
                                 strict, {"holdout": {}}, lambda _: None, model_dir) is None  # no gain: left out
