"""Static features of the fast path: MiniLM distilled by model2vec into token vectors. Distillation is
deterministic and encodes as model2vec itself does; the vectors travel inside the artifact (float16,
checksummed) and a trained artifact decides the same after save and load; an artifact without them
(written before they existed) still loads and decides on TF-IDF alone."""

from __future__ import annotations

import os

import numpy as np
import pytest

from macaron.router.classifier import static_embedding
from macaron.router.classifier.data import LABELS
from macaron.router.classifier.decision import SpecialistClassifier
from macaron.router.classifier.errors import ArtifactError
from macaron.router.classifier.model import SHIPPED_ARTIFACT, Artifact, softmax
from macaron.router.classifier.settings import ClassifierSettings
from macaron.router.classifier.train import TrainConfig, fast_logits, train, training_text
from macaron.router.classifier.features import analyze

from .conftest import subset

DIMS = 16
TEXTS = ["add a dark-mode toggle to my settings page", "why?", "grep -rn TODO src | wc -l",
         "Book a table for two at 8pm", "日本語のテキスト 🎉", "", "   ", "x" * 5000]


@pytest.fixture(scope="module")
def static() -> static_embedding.StaticEmbedding:
    """Cheap real vectors for the artifact tests: MiniLM's own input token embeddings (first DIMS columns),
    indexed by its own tokenizer; distillation itself (minutes on a loaded core) is the slow test below."""
    from safetensors.numpy import load_file

    folder = static_embedding.encoder_dir()
    table = load_file(str(folder / "model.safetensors"))
    name = next(k for k in table if k.endswith("word_embeddings.weight"))
    vectors = table[name][:, :DIMS].astype(np.float16).astype(np.float32)
    return static_embedding.StaticEmbedding(vectors=vectors, tokenizer_json=(folder / "tokenizer.json").read_text())


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(not os.environ.get("MACARON_DISTILL_TEST"),
                    reason="set MACARON_DISTILL_TEST=1 (MiniLM over its 30k tokens: 30 s on a quiet core, minutes loaded)")
def test_distillation_encodes_like_model2vec_and_is_deterministic() -> None:
    from model2vec import StaticModel
    from tokenizers import Tokenizer

    static = static_embedding.distill(64, scale=1.0)  # the dimensions `--static-dims 64` trains with
    assert static.vectors.shape[1] == 64 and static.vectors.shape[0] > 20_000  # MiniLM's word pieces
    np.testing.assert_array_equal(static.vectors, static.vectors.astype(np.float16).astype(np.float32))
    reference = StaticModel(vectors=static.vectors, tokenizer=Tokenizer.from_str(static.tokenizer_json), normalize=True)
    ours = static.encode(TEXTS)
    np.testing.assert_allclose(ours, reference.encode(TEXTS), atol=1e-5)
    # Meaning survives: a paraphrase with other words is nearer than a request of another domain.
    a, b, c = static.encode(["list the files in this folder sorted by size", "show every file of a directory ordered by size",
                             "book a table for two tonight"])
    assert a @ b > a @ c + 0.1
    assert static_embedding.distill(64, scale=1.0).sha256() == static.sha256()


def test_encode_one_equals_encode(static) -> None:
    ours = static.encode(TEXTS)
    for row, text in enumerate(TEXTS):
        np.testing.assert_allclose(static.encode_one(text), ours[row], atol=1e-12)
    assert np.allclose(np.linalg.norm(ours[:5], axis=1), 1.0)  # L2-normalised, times scale 1
    assert not ours[5].any() and not ours[6].any()  # no tokens, no signal
    doubled = static_embedding.StaticEmbedding(vectors=static.vectors, tokenizer_json=static.tokenizer_json, scale=2.0)
    np.testing.assert_allclose(doubled.encode(TEXTS), 2 * ours)


def test_payload_round_trip_and_checksum(static) -> None:
    payload = static.to_payload()
    assert payload["vectors"].dtype == np.float16
    again = static_embedding.StaticEmbedding.from_payload(payload)
    np.testing.assert_array_equal(again.encode(TEXTS), static.encode(TEXTS))
    damaged = dict(payload, vectors=payload["vectors"].copy())
    damaged["vectors"][0, 0] += 1
    with pytest.raises(ArtifactError, match="checksum"):
        static_embedding.StaticEmbedding.from_payload(damaged)


def test_trained_artifact_with_static_features_round_trips(static, tmp_path, train_examples, dev_examples) -> None:
    small = subset(train_examples, every=12)
    config = TrainConfig(seed=0, escalation=False, holdout=False, multiturn=False, static_dims=DIMS)
    artifact = train(config=config, train_examples=small, static=static)
    fast = artifact.fast
    assert fast.static is static
    assert fast.weights.shape == (fast.vectorizer.n_features + DIMS, len(LABELS))
    assert np.abs(fast.weights[fast.vectorizer.n_features:]).sum() > 0  # the head uses them
    path = artifact.save(tmp_path / "s.joblib")
    clf = SpecialistClassifier.load(ClassifierSettings(artifact_path=str(path), escalation=False))
    assert clf.artifact.fast.static is not None and clf.artifact.fast.static.sha256() == static.sha256()
    texts = [e.text for e in dev_examples[:30] if e.text]
    batch = softmax(fast_logits(fast, [analyze(training_text_of(t)) for t in texts], texts=texts) / fast.temperature)
    loaded = np.array([list(clf.classify(t).probabilities.values()) for t in texts])
    np.testing.assert_allclose(batch, loaded, atol=1e-6)
    # Without the static part, the decisions would differ: the features are not dead weight.
    tfidf_only = softmax((np.asarray(fast.vectorizer.transform_many([analyze(t) for t in texts])
                                     @ fast.weights[: fast.vectorizer.n_features]) + fast.bias) / fast.temperature)
    assert np.abs(tfidf_only - batch).max() > 1e-3
    # A fast model with static features refuses to score rows without them.
    with pytest.raises(ValueError, match="static"):
        fast_logits(fast, [analyze(t) for t in texts])


def training_text_of(text: str) -> str:
    from macaron.router.classifier.data import Example

    return training_text(Example(label="chat", text=text), 4000)


def test_artifact_without_static_features_still_loads() -> None:
    """The shipped artifact's payload without a "static" entry (as written before static features existed)."""
    payload = Artifact.load(SHIPPED_ARTIFACT).to_payload()
    if payload.pop("static", None) is not None:  # keep only the TF-IDF rows, as such an artifact has
        rows = sum(len(terms) for terms in payload["vocab"].values())
        payload["fast"] = dict(payload["fast"], weights=payload["fast"]["weights"][:rows])
    artifact = Artifact.from_payload(payload)
    assert artifact.fast.static is None
    clf = SpecialistClassifier(artifact, ClassifierSettings(escalation=False))
    assert clf.classify("write a python function that parses ISO dates").specialist == "code"


def test_static_rows_must_match_the_head(static) -> None:
    payload = Artifact.load(SHIPPED_ARTIFACT).to_payload()
    if payload.get("static") is None:
        payload["static"] = static.to_payload()  # TF-IDF-only head, static vectors: rows do not match
    else:
        payload["static"] = dict(payload["static"])
        payload["static"]["vectors"] = static.to_payload()["vectors"][:, :3]
        payload["static"]["sha256"] = None
    with pytest.raises(ArtifactError, match="feature rows"):
        Artifact.from_payload(payload)
