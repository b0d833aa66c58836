"""Refitting the conversation decision alone (turn_refit.py, `macaron router refit-turns`): on the inputs a train
kept it gives what a full train on the same multi-turn data gives, and it refuses where it could not."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from macaron.cli import main
from macaron.router.classifier.data import load_jsonl
from macaron.router.classifier.model import Artifact, adapter_path_for, base_adapter_path_for
from macaron.router.classifier.train import TrainConfig, train
from macaron.router.classifier.turn_refit import RefitError, TurnStepInputs, refit, save_beside

from .conftest import subset

CONFIG = TrainConfig(escalation=False, holdout=False)


@pytest.fixture(scope="module")
def kept(tmp_path_factory, train_examples, routing_data_dir):
    """A small train that kept its conversation step's inputs, and the multi-turn data it was fitted on."""
    path = tmp_path_factory.mktemp("refit") / "turn_inputs.joblib"
    multiturn = load_jsonl(routing_data_dir / "multiturn_train.jsonl")
    artifact = train(config=CONFIG, train_examples=subset(train_examples, every=24),
                     multiturn_examples=subset(multiturn, every=16), save_turn_inputs=path)
    return artifact, path, multiturn


def _copy(artifact: Artifact) -> Artifact:
    """A copy that shares nothing with `artifact` (its report included), so a refit cannot touch the original."""
    import copy

    return Artifact.from_payload(copy.deepcopy(artifact.to_payload()))


def test_a_refit_on_the_same_data_gives_what_the_train_gave(kept) -> None:
    artifact, path, multiturn = kept
    again = refit(TurnStepInputs.load(path), _copy(artifact), subset(multiturn, every=16))
    np.testing.assert_allclose(again.turn.theta, artifact.turn.theta, rtol=0, atol=1e-9)
    np.testing.assert_allclose(again.followup.weights, artifact.followup.weights, rtol=0, atol=1e-6)
    assert again.report["multiturn_holdout"]["pooled"] == artifact.report["multiturn_holdout"]["pooled"]
    assert again.report["turn_refit"]["n_multiturn"] == len(subset(multiturn, every=16))
    chosen = refit(TurnStepInputs.load(path), _copy(artifact), subset(multiturn, every=16), followup_encoder="frozen")
    assert chosen.report["config"]["followup_embedding_encoder"] == "frozen"  # the report says what the step read
    assert artifact.report["config"]["followup_embedding_encoder"] == "both"  # the training config's default


def test_a_refit_on_new_data_gives_what_a_full_train_on_it_gives(kept, train_examples) -> None:
    artifact, path, multiturn = kept
    other = subset(multiturn, every=16, offset=3)
    full = train(config=CONFIG, train_examples=subset(train_examples, every=24), multiturn_examples=other)
    again = refit(TurnStepInputs.load(path), _copy(artifact), other)
    assert not np.allclose(again.turn.theta, artifact.turn.theta)
    np.testing.assert_allclose(again.turn.theta, full.turn.theta, rtol=0, atol=1e-9)
    assert again.report["multiturn_holdout"]["pooled"] == full.report["multiturn_holdout"]["pooled"]
    np.testing.assert_allclose(again.fast.weights, artifact.fast.weights, atol=1e-6)  # the single-turn parts as they were


def _hashed_embed(texts) -> np.ndarray:
    """A stand-in sentence encoder: 16 deterministic numbers per text."""
    import hashlib

    rows = [np.frombuffer(hashlib.sha256(t.encode()).digest()[:16], dtype=np.uint8) / 255.0 - 0.5 for t in texts]
    return np.stack(rows) if rows else np.zeros((0, 16))


def test_a_refit_reads_the_embeddings_the_train_computed(tmp_path, train_examples, routing_data_dir) -> None:
    """With escalation the step embeds the follow-up model's short turns; the refit reads them from the file, so it
    needs no encoder and gives the train's decision."""
    config = TrainConfig(escalation=True, holdout=False)
    multiturn = subset(load_jsonl(routing_data_dir / "multiturn_train.jsonl"), every=32)
    artifact = train(config=config, train_examples=subset(train_examples, every=32), multiturn_examples=multiturn,
                     embed=_hashed_embed, save_turn_inputs=tmp_path / "inputs.joblib")
    inputs = TurnStepInputs.load(tmp_path / "inputs.joblib")
    assert artifact.followup_embedded is not None and len(inputs.embeddings) > 100
    again = refit(inputs, _copy(artifact), multiturn)
    np.testing.assert_allclose(again.turn.theta, artifact.turn.theta, rtol=0, atol=1e-9)
    np.testing.assert_allclose(again.followup_embedded.embedding_weights, artifact.followup_embedded.embedding_weights,
                               rtol=0, atol=1e-9)
    moved = _copy(artifact)
    moved.escalation_threshold = 0.9  # an artifact fitted at another threshold than the step would choose
    with pytest.raises(RefitError, match="threshold would move"):
        refit(TurnStepInputs.load(tmp_path / "inputs.joblib"), moved, multiturn)


def test_a_refit_refuses_another_fast_model_or_changed_training_data(kept) -> None:
    artifact, path, multiturn = kept
    inputs = TurnStepInputs.load(path)
    other = _copy(artifact)
    other.fast = dataclasses.replace(other.fast, weights=other.fast.weights + 0.01)
    with pytest.raises(RefitError, match="fast model is not the one"):
        refit(inputs, other, subset(multiturn, every=16))
    with pytest.raises(RefitError, match="train.jsonl changed"):
        refit(dataclasses.replace(inputs, train_sha256="a" * 64), _copy(artifact), subset(multiturn, every=16),
              train_sha256="b" * 64)
    with pytest.raises(RefitError, match="no multi-turn examples"):
        refit(inputs, _copy(artifact), [])


def test_refit_turns_says_how_to_get_the_inputs(tmp_path, capsys) -> None:
    assert main(["router", "refit-turns", "--inputs", str(tmp_path / "missing.joblib")]) == 2
    assert "macaron router train --save-turn-inputs" in capsys.readouterr().err
    (tmp_path / "foreign.joblib").write_bytes(b"not a joblib file")
    assert main(["router", "refit-turns", "--inputs", str(tmp_path / "foreign.joblib")]) == 2
    assert "cannot be read" in capsys.readouterr().err


def test_refit_turns_writes_the_refitted_artifact_and_its_report(kept, tmp_path, routing_data_dir, capsys) -> None:
    """The command end to end: the data folder's multi-turn file, the artifact beside its report, the data's hash."""
    import json

    artifact, path, multiturn = kept
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_bytes((routing_data_dir / "train.jsonl").read_bytes())
    other = (routing_data_dir / "multiturn_train.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[3::16]
    (data / "multiturn_train.jsonl").write_text("".join(other), encoding="utf-8")
    source = artifact.save(tmp_path / "in" / "specialist_classifier.joblib")
    out = tmp_path / "out" / "specialist_classifier.joblib"
    assert main(["router", "refit-turns", "--inputs", str(path), "--artifact", str(source), "--data-dir", str(data),
                 "--out", str(out)]) == 0
    expected = refit(TurnStepInputs.load(path), Artifact.load(source), subset(multiturn, every=16, offset=3))
    written = Artifact.load(out)
    np.testing.assert_allclose(written.turn.theta, expected.turn.theta, rtol=0, atol=1e-9)
    report = json.loads(out.with_suffix(".report.json").read_text(encoding="utf-8"))
    assert report["turn_refit"]["n_multiturn"] == len(other)
    assert len(report["data"]["multiturn_train_sha256"]) == 64
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["artifact"] == str(out)


def test_a_refitted_artifact_saved_elsewhere_keeps_its_encoder_adapters(kept, tmp_path) -> None:
    artifact, _, _ = kept
    source = tmp_path / "in" / "specialist_classifier.joblib"
    artifact.save(source)
    for sidecar, content in ((adapter_path_for, b"minilm adapter"), (base_adapter_path_for, b"base adapter")):
        sidecar(source).write_bytes(content)
    out = save_beside(Artifact.load(source), source, tmp_path / "out" / "specialist_classifier.joblib")
    assert adapter_path_for(out).read_bytes() == b"minilm adapter"
    assert base_adapter_path_for(out).read_bytes() == b"base adapter"
    assert Artifact.load(out).turn is not None


def _other_embed(texts) -> np.ndarray:
    """A second stand-in encoder (the frozen one beside a tuned `_hashed_embed`): 8 other numbers per text."""
    import hashlib

    rows = [np.frombuffer(hashlib.md5(t.encode()).digest()[:8], dtype=np.uint8) / 255.0 - 0.5 for t in texts]
    return np.stack(rows) if rows else np.zeros((0, 8))


def test_the_follow_up_model_reads_the_frozen_encoder_where_the_escalation_encoder_is_tuned(
        train_examples, routing_data_dir) -> None:
    """followup.py: the tuned encoder moves with every train, so the follow-up model may read the frozen one
    (`followup_embedding_encoder="frozen"`); the artifact says which, and keeps saying it through a round trip."""
    from macaron.router.classifier import train as train_module

    config = TrainConfig(escalation=True, holdout=False, followup_embedding_encoder="frozen")
    multiturn = subset(load_jsonl(routing_data_dir / "multiturn_train.jsonl"), every=32)
    examples = subset(train_examples, every=32)
    artifact = train(config=config, train_examples=examples, multiturn_examples=multiturn, embed=_hashed_embed)
    assert artifact.followup_embedded.embedding_encoder == "escalation"  # one encoder: nothing else to read
    texts = [train_module.training_text(e, config.max_chars) for e in examples]
    _, (_, embedded), _, _ = train_module._train_turns(
        multiturn, texts, None, artifact.fast, artifact.embedding, _hashed_embed, config, fast_t=1.0, embed_t=1.0,
        threshold=0.7, alpha=0.5, say=lambda _: None, repos=np.array([e.repository for e in examples]),
        frozen_embed=_other_embed)
    assert embedded.embedding_encoder == "frozen" and embedded.embedding_weights.shape == (8,)
    artifact.followup_embedded = embedded
    assert _copy(artifact).followup_embedded.embedding_encoder == "frozen"
    _, (_, escalation), _, _ = train_module._train_turns(
        multiturn, texts, None, artifact.fast, artifact.embedding, _hashed_embed,
        dataclasses.replace(config, followup_embedding_encoder="escalation"), fast_t=1.0, embed_t=1.0, threshold=0.7,
        alpha=0.5, say=lambda _: None, frozen_embed=_other_embed)
    assert escalation.embedding_encoder == "escalation" and escalation.embedding_weights.shape == (16,)
    _, (_, both), _, _ = train_module._train_turns(
        multiturn, texts, None, artifact.fast, artifact.embedding, _hashed_embed,
        dataclasses.replace(config, followup_embedding_encoder="both"), fast_t=1.0, embed_t=1.0, threshold=0.7,
        alpha=0.5, say=lambda _: None, frozen_embed=_other_embed)
    assert both.embedding_encoder == "both" and both.embedding_weights.shape == (16 + 8,)  # tuned first, then frozen
    with pytest.raises(ValueError, match="followup_embedding_encoder must be one of escalation, frozen, both"):
        train_module._train_turns(
            multiturn, texts, None, artifact.fast, artifact.embedding, _hashed_embed,
            dataclasses.replace(config, followup_embedding_encoder="tuned"), fast_t=1.0, embed_t=1.0, threshold=0.7,
            alpha=0.5, say=lambda _: None, frozen_embed=_other_embed)
