"""Training: reproducible artifacts, the whole pipeline on a subset, hold-out by source
repository (printed), and the error when the data is missing."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

from macaron.router.classifier.data import LABELS, find_data_dir
from macaron.router.classifier.decision import SpecialistClassifier
from macaron.router.classifier.errors import TrainingDataError
from macaron.router.classifier.features import analyze
from macaron.router.classifier.holdout import out_of_fold, summarize
from macaron.router.classifier.model import Artifact, softmax
from macaron.router.classifier.settings import ClassifierSettings
from macaron.router.classifier.train import (
    TrainConfig,
    fit_temperature,
    pick_threshold,
    source_weights,
    train,
    training_text,
)

from .conftest import subset


def fake_embed(texts):
    """Deterministic stand-in for MiniLM (hashed bag of words, L2-normalised), so the
    escalation half of training is exercised without loading the encoder."""
    out = np.zeros((len(texts), 64))
    for row, text in enumerate(texts):
        for word in text.lower().split():
            out[row, int(hashlib.md5(word.encode()).hexdigest()[:6], 16) % 64] += 1.0
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.where(norms == 0, 1, norms)


def payload_digest(artifact: Artifact) -> str:
    payload = artifact.to_payload()
    payload.pop("report")
    digest = hashlib.sha256()
    for key in sorted(payload):
        value = payload[key]
        if isinstance(value, dict):
            for sub in sorted(value):
                digest.update(repr((key, sub, _bytes(value[sub]))).encode())
        else:
            digest.update(repr((key, _bytes(value))).encode())
    return digest.hexdigest()


def _bytes(value):
    return value.tobytes() if isinstance(value, np.ndarray) else value


def test_training_is_reproducible(train_examples) -> None:
    small = subset(train_examples, every=6)
    config = TrainConfig(seed=0, escalation=False, holdout=False)
    first = train(config=config, train_examples=small)
    second = train(config=config, train_examples=small)
    assert payload_digest(first) == payload_digest(second)
    assert first.fast.weights.shape[1] == len(LABELS)


def test_full_pipeline_on_a_subset(tmp_path, train_examples, dev_examples) -> None:
    """Hold-out, temperatures, escalation choice, save and reload: the same decisions."""
    small = subset(train_examples, every=16)
    config = TrainConfig(seed=0)
    artifact = train(config=config, train_examples=small, embed=fake_embed)
    holdout = artifact.report["holdout"]
    assert artifact.escalation_threshold in config.thresholds
    assert 0.05 < holdout["fast_temperature"] < 20
    assert holdout["fast_ece_after"] <= holdout["fast_ece_before"] + 0.02  # fitted for NLL, not ECE
    assert set(holdout["per_repository"]) == {e.repository for e in small}
    chosen = artifact.report["deliverable"]
    assert chosen["rows"] > 0 and set(chosen["fast_accuracy_by_weight"]) == {str(w) for w in config.deliverable_weights}
    assert artifact.fast.deliverable_weight == chosen["chosen"] in config.deliverable_weights
    path = artifact.save(tmp_path / "a.joblib")
    again = Artifact.load(path)
    assert payload_digest(again) == payload_digest(artifact)
    settings = ClassifierSettings(artifact_path=str(path), escalation=False)
    clf = SpecialistClassifier.load(settings)
    texts = [e.text for e in dev_examples[:20]]
    direct = [softmax(artifact.fast.logits(clf.conversation(t))) for t in texts]
    loaded = [np.array(list(clf.classify(t).probabilities.values())) for t in texts]
    np.testing.assert_allclose(direct, loaded, atol=1e-6)


def _curve(points):
    return [dict(zip(("threshold", "accuracy", "escalation_rate"), p)) for p in points]


# A synthetic curve shaped like the shipped artifact's source hold-out: 0.6, 0.65 and 0.7 within
# 0.15 points of score of each other, 0.75 over the 30 % cap.
SINGLE = _curve([(0.5, 0.864, 0.080), (0.55, 0.8718, 0.127), (0.6, 0.8776, 0.175),
                 (0.65, 0.8787, 0.221), (0.7, 0.8808, 0.269), (0.75, 0.90, 0.322)])


def test_threshold_rule_single_turn_ties_go_to_the_cheaper_threshold() -> None:
    config = TrainConfig()
    assert pick_threshold(SINGLE, config) == 0.6
    # Noise of 0.2 points that makes 0.7 the best single-turn score does not move the choice...
    noisy = [dict(p, accuracy=p["accuracy"] + (0.002 if p["threshold"] == 0.7 else 0.0)) for p in SINGLE]
    assert pick_threshold(noisy, config) == 0.6
    # ...without the tie margin it would (the rule before the margin).
    assert pick_threshold(noisy, TrainConfig(threshold_tie_margin=0.0)) == 0.7
    # A real gain beyond the margin does.
    gain = [dict(p, accuracy=p["accuracy"] + (0.004 if p["threshold"] == 0.7 else 0.0)) for p in SINGLE]
    assert pick_threshold(gain, config) == 0.7
    # The cap holds whatever the accuracy beyond it; with every point over it, the lowest threshold.
    assert pick_threshold([dict(p, accuracy=0.99 if p["threshold"] == 0.75 else p["accuracy"]) for p in SINGLE],
                          config) == 0.6
    assert pick_threshold(_curve([(0.6, 0.8, 0.4), (0.5, 0.7, 0.35)]), config) == 0.5


def test_threshold_rule_counts_the_multiturn_holdout() -> None:
    """A multi-turn gain moves the threshold; a flat multi-turn curve leaves the single-turn choice,
    and one whose escalations buy nothing pulls it down."""
    config = TrainConfig()
    rising = {0.5: 0.80, 0.55: 0.81, 0.6: 0.82, 0.65: 0.83, 0.7: 0.84}
    curve = [dict(p, multiturn_accuracy=rising[p["threshold"]], multiturn_escalation_rate=0.5 * p["escalation_rate"])
             for p in SINGLE if p["threshold"] in rising]
    assert pick_threshold(curve, config) == 0.7
    assert pick_threshold(curve, TrainConfig(multiturn_weight=0.0)) == 0.6
    flat_free = [dict(p, multiturn_accuracy=0.82, multiturn_escalation_rate=0.0) for p in curve]
    assert pick_threshold(flat_free, config) == 0.6
    flat_costly = [dict(p, multiturn_accuracy=0.82, multiturn_escalation_rate=p["escalation_rate"]) for p in curve]
    assert pick_threshold(flat_costly, config) == 0.55


def test_temperature_recovers_a_known_scale() -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4000, 4)) * 3
    y = np.array([rng.choice(4, p=p) for p in softmax(logits)])
    assert fit_temperature(logits * 2.0, y) == pytest.approx(2.0, rel=0.1)


def test_source_weights_balance_classes_and_sources() -> None:
    repos = np.array(["a"] * 90 + ["b"] * 10 + ["c"] * 50)
    y = np.array([0] * 100 + [1] * 50)
    w = source_weights(repos, y)
    assert w[:90].sum() == pytest.approx(w[90:100].sum())
    assert w[y == 0].sum() == pytest.approx(w[y == 1].sum())


def test_a_repository_with_a_handful_of_lines_of_a_class_gets_a_share_in_proportion() -> None:
    repos = np.array(["a"] * 100 + ["b"] * 5 + ["c"] * 100 + ["d"] * 100)
    y = np.array([0] * 105 + [1] * 200)
    w = source_weights(repos, y, full_share_lines=50)
    assert w[100:105].sum() == pytest.approx(w[:100].sum() / 10)  # 5 lines of 50: a tenth of a share
    assert w[y == 0].sum() == pytest.approx(w[y == 1].sum())  # classes still weigh the same
    assert w[205:].sum() == pytest.approx(w[105:205].sum())  # full shares stay equal
    assert source_weights(repos, y)[100:105].sum() == pytest.approx(source_weights(repos, y)[:100].sum())


def test_missing_data_says_what_to_do(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("MACARON_ROUTING_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(TrainingDataError, match="MACARON_ROUTING_DATA"):
        find_data_dir()


QUICK_HOLDOUT = ("openai/grade-school-math", "openai/human-eval", "yizhongw/self-instruct", "mnluzimu/WebGen-Agent",
                 "sonos/nlu-benchmark", "TellinaTool/nl2bash")
# Measured (fast path, 1/4 of train, these six repositories): mean accuracy 0.93 (0.79 before the
# public dataset sources, 0.65 before the package sources; grade-school math 0.98, was 0.45: SVAMP
# and ASDiv now teach math word problems from other repositories; self-instruct 0.83 is the weakest).
QUICK_HOLDOUT_FLOOR = 0.88


def _holdout(train_examples, repos_to_hold, every: int):
    rows = subset(train_examples, every=every)
    texts = [training_text(e, 4000) for e in rows]
    bags = [analyze(t) for t in texts]
    y = np.array([LABELS.index(e.label) for e in rows])
    repos = np.array([e.repository for e in rows])
    oof = out_of_fold(bags, None, y, repos, TrainConfig(), only=repos_to_hold)
    return summarize(oof.y, oof.groups, softmax(oof.fast_logits), None, 0.0, 1.0)


def _print_holdout(capsys, title: str, summary: dict) -> None:
    with capsys.disabled():
        print(f"\n[classifier] {title}: mean={summary['mean_fast_accuracy']} "
              f"macro_f1={summary['pooled_fast']['macro_f1']}")
        for label, m in summary["pooled_fast"]["per_class"].items():
            print(f"  {label:6s} precision={m['precision']} recall={m['recall']} n={m['support']}")
        for name, entry in summary["per_repository"].items():
            print(f"  {name:40s} n={entry['n']:5d} {','.join(entry['labels']):12s} acc={entry['fast_accuracy']}")


def test_source_holdout_quick(train_examples, capsys) -> None:
    """Fast path, fitted on a third of train without the held-out repository (printed)."""
    summary = _holdout(train_examples, QUICK_HOLDOUT, every=4)
    _print_holdout(capsys, "source hold-out (fast path, 1/4 of train, 6 repositories)", summary)
    # A floor a little under the measured mean (0.93); self-instruct and sonos are the lowest (0.83-0.86).
    assert summary["mean_fast_accuracy"] >= QUICK_HOLDOUT_FLOOR


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("MACARON_FULL_HOLDOUT"), reason="set MACARON_FULL_HOLDOUT=1 (about 1-2 min)")
def test_source_holdout_full(train_examples, capsys) -> None:
    repos = sorted({e.repository for e in train_examples})
    summary = _holdout(train_examples, repos, every=1)
    _print_holdout(capsys, "source hold-out (fast path, all of train, every repository)", summary)
    assert summary["mean_fast_accuracy"] > 0.6
