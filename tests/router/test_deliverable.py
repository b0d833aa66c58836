"""The deliverable sentences of a request ("... Build a disruption view with ..."): which sentences they are,
and the fast model's mix of the whole text's reading with theirs, the same served as trained, kept by the
artifact, and off (0) for an artifact written before it."""

from __future__ import annotations

import numpy as np
import pytest

from macaron.router.classifier.decision import SpecialistClassifier
from macaron.router.classifier.deliverable import deliverable_sentences
from macaron.router.classifier.features import analyze
from macaron.router.classifier.model import Artifact, softmax
from macaron.router.classifier.settings import ClassifierSettings
from macaron.router.classifier.train import TrainConfig, fast_logits, train

from .conftest import subset

SITUATION_THEN_VIEW = ("My train to Lyon was cancelled and I have a meeting there at nine. "
                       "Build a rebooking board with the next departures, seat prices and my refund status.")
MIXED = [
    SITUATION_THEN_VIEW,
    "I keep forgetting to water the plants on the balcony. Could you set up a reminder every Sunday at 10am?",
    "Our CI fails on main since this morning.\nPlease write a bash script that bisects the last 20 commits.",
    "We sell handmade candles. Now create a landing page with a hero image and three product cards.",
]


@pytest.mark.parametrize(("text", "expected"), [
    (SITUATION_THEN_VIEW, "Build a rebooking board with the next departures, seat prices and my refund status."),
    ("I have three kids. Please, can you make a weekly chore chart for them? Thanks!",
     "Please, can you make a weekly chore chart for them?"),
    ("Line one of context\nwrite a haiku about rain", "write a haiku about rain"),
    ("Our tutors work evenings. For the tutoring centre, build me a scheduler. It should list rooms.",
     "For the tutoring centre, build me a scheduler."),  # a short framing clause before the verb
])
def test_the_sentences_that_ask_for_something_to_be_made(text: str, expected: str) -> None:
    assert deliverable_sentences(text) == expected


@pytest.mark.parametrize("text", [
    "Build a disruption view with my itinerary.",  # one sentence: the request is its own deliverable
    "My flight is delayed. What are my options?",  # nothing is to be made
    "Build a page. Make it blue.",  # the making sentences are the whole text
    "The builder pattern confuses me. Why use it?",  # "builder" is not "build"
    "For dinner tonight, I want pasta. Any recipe?",  # a framing clause without a verb of making
    "",
])
def test_no_deliverable_to_mix(text: str) -> None:
    assert deliverable_sentences(text) is None


@pytest.fixture(scope="module")
def mixing_artifact(train_examples) -> Artifact:
    artifact = train(config=TrainConfig(seed=0, escalation=False, holdout=False, multiturn=False),
                     train_examples=subset(train_examples, every=12))
    artifact.fast.deliverable_weight = 0.5
    return artifact


def test_served_as_trained_and_kept_by_the_artifact(mixing_artifact, tmp_path) -> None:
    fast = mixing_artifact.fast
    batch = softmax(fast_logits(fast, [analyze(t) for t in MIXED], texts=MIXED) / fast.temperature)
    clf = SpecialistClassifier.load(ClassifierSettings(artifact_path=str(mixing_artifact.save(tmp_path / "d.joblib")),
                                                       escalation=False))
    assert clf.artifact.fast.deliverable_weight == 0.5
    served = np.array([list(clf.classify(t).probabilities.values()) for t in MIXED])
    np.testing.assert_allclose(batch, served, atol=1e-6)
    # The mix moves every one of them: the deliverable is read, not dead weight.
    whole = softmax(fast_logits(fast, [analyze(t) for t in MIXED]) / fast.temperature)
    assert (np.abs(whole - batch).max(axis=1) > 1e-3).all()
    # The last turn of a conversation is read the same way.
    turn = clf.classify(messages=[{"role": "user", "content": MIXED[0]}])
    np.testing.assert_allclose(list(turn.probabilities.values()), batch[0], atol=1e-6)


def test_an_artifact_trained_before_the_mix_is_served_at_the_settings_weight(mixing_artifact) -> None:
    payload = mixing_artifact.to_payload()
    del payload["fast"]["deliverable_weight"]
    before = Artifact.from_payload(payload)
    assert before.fast.deliverable_weight is None and "deliverable_weight" not in before.to_payload()["fast"]
    # Read alone, such a fast model reads the whole text, as it was trained.
    np.testing.assert_allclose(before.fast.raw_text_logits(SITUATION_THEN_VIEW),
                               before.fast.raw_logits(*before.fast.featurizer.transform(SITUATION_THEN_VIEW)))
    served = SpecialistClassifier(before, ClassifierSettings(escalation=False))
    assert served.artifact.fast.deliverable_weight == ClassifierSettings().untrained_deliverable_weight == 0.5
    assert before.fast.deliverable_weight is None  # the shared artifact keeps its own
    as_trained = SpecialistClassifier(before, ClassifierSettings(escalation=False, untrained_deliverable_weight=0.0))
    assert as_trained.artifact.fast.deliverable_weight == 0.0
    # An artifact's own weight wins over the fallback; the setting wins over both.
    assert SpecialistClassifier(mixing_artifact, ClassifierSettings(escalation=False)).artifact.fast.deliverable_weight == 0.5
    forced = SpecialistClassifier(mixing_artifact, ClassifierSettings(escalation=False, deliverable_weight=0.25))
    assert forced.artifact.fast.deliverable_weight == 0.25 and mixing_artifact.fast.deliverable_weight == 0.5
    a = as_trained.classify(SITUATION_THEN_VIEW).probabilities
    b = served.classify(SITUATION_THEN_VIEW).probabilities
    assert max(abs(a[k] - b[k]) for k in a) > 1e-3
