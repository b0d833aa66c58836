"""The follow-up model (how much a last turn leans on the conversation) and artifacts trained before it."""

from __future__ import annotations

import numpy as np
import pytest

from macaron.router.classifier import SpecialistClassifier, followup
from macaron.router.classifier.features import analyze
from macaron.router.classifier.model import Artifact, ArtifactError
from macaron.router.classifier.turns import FEATURES, TurnInputs

FOLLOW_UPS = ["why?", "you missed one", "now apply it to the rest", "can you make it shorter?"]
REQUESTS = [
    "Write a Python function that merges two sorted lists into one sorted list.",
    "Set an alarm for 6:30 tomorrow morning and remind me to call the dentist.",
    "Design a landing page with a hero banner, three pricing cards and a footer.",
    "What were the main causes of the French Revolution?",
]


def test_shipped_artifact_reads_follow_ups_as_leaning_on_the_conversation(fast_classifier) -> None:
    model, featurizer = fast_classifier.artifact.followup, fast_classifier.artifact.fast.featurizer
    assert model is not None
    leaning = [model.probability(featurizer, t) for t in FOLLOW_UPS]
    standalone = [model.probability(featurizer, t) for t in REQUESTS]
    assert min(leaning) > max(standalone), (leaning, standalone)
    # The batch path (training) and the one-text path (serving) agree.
    batch = model.probabilities(fast_classifier.artifact.fast.vectorizer, FOLLOW_UPS + REQUESTS)
    np.testing.assert_allclose(batch, leaning + standalone, atol=1e-6)


def test_short_pointing_back_turns_lean_more_than_self_contained_requests_of_another_domain(fast_classifier) -> None:
    """The trained model, through the serving path: follow-ups after a code answer against short, self-contained
    requests of other domains. TF-IDF alone read "Is it going to rain tomorrow?" as leaning on the conversation
    (0.65) more than "that doesn't work" (0.52) or "why?" (0.62); their form (short, pointing back) tells them apart."""
    model, featurizer = fast_classifier.artifact.followup, fast_classifier.artifact.fast.featurizer
    pointing_back = ["why?", "that doesn't work", "what does this mean?", "could you double-check that?", "fix it"]
    other_domain = ["Is it going to rain tomorrow?", "What is the capital of Australia?", "Set an alarm for 7 am.",
                    "Translate 'good morning' into Spanish.", "Create a responsive navbar with a dropdown menu."]
    leaning = {t: model.probability(featurizer, t) for t in pointing_back}
    standalone = {t: model.probability(featurizer, t) for t in other_domain}
    assert min(leaning.values()) > max(standalone.values()), (leaning, standalone)


def test_fit_counts_each_text_once_and_needs_both_kinds(fast_classifier) -> None:
    vectorizer = fast_classifier.artifact.fast.vectorizer
    texts = FOLLOW_UPS * 20 + REQUESTS
    model = followup.fit(vectorizer, texts, np.array([1] * 80 + [0] * 4))
    assert model.probabilities(vectorizer, ["you missed one"])[0] > model.probabilities(vectorizer, [REQUESTS[0]])[0]
    flat = followup.fit(vectorizer, REQUESTS, np.zeros(4, dtype=int))
    assert flat.probabilities(vectorizer, FOLLOW_UPS).tolist() == [0.5] * 4


def test_features_computed_once_fit_and_predict_as_featurized_each_time(fast_classifier) -> None:
    """The train featurizes every text once (`TextRows`) for all its out-of-fold fits; that must change nothing."""
    vectorizer = fast_classifier.artifact.fast.vectorizer
    texts, labels = FOLLOW_UPS + REQUESTS, np.array([1] * 4 + [0] * 4)
    extra = ["Book a table for two at eight", "Sort this list of numbers in Python"]
    rows = followup.TextRows(vectorizer, texts + extra + ["an unused text"])
    kept = followup.fit(vectorizer, texts, labels, standalone=extra, standalone_share=0.3, rows=rows)
    each = followup.fit(vectorizer, texts, labels, standalone=extra, standalone_share=0.3)
    np.testing.assert_array_equal(kept.weights, each.weights)
    np.testing.assert_array_equal(kept.cue_weights, each.cue_weights)
    np.testing.assert_array_equal(kept.probabilities(vectorizer, texts, rows=rows), each.probabilities(vectorizer, texts))
    groups = np.array(["a"] * 4 + ["b"] * 4)
    np.testing.assert_array_equal(followup.out_of_fold(vectorizer, texts, ["stay"] * 4 + ["switch"] * 4, groups,
                                                       standalone=extra, standalone_groups=["a", "b"],
                                                       standalone_share=0.3, rows=rows),
                                  followup.out_of_fold(vectorizer, texts, ["stay"] * 4 + ["switch"] * 4, groups,
                                                       standalone=extra, standalone_groups=["a", "b"],
                                                       standalone_share=0.3))


def test_out_of_fold_never_sees_the_held_out_group(fast_classifier) -> None:
    vectorizer = fast_classifier.artifact.fast.vectorizer
    texts = FOLLOW_UPS + REQUESTS + ["go on"]
    kinds = ["stay"] * 4 + ["switch"] * 4 + ["stay"]
    groups = np.array(["a"] * 8 + ["b"])
    out = followup.out_of_fold(vectorizer, texts, kinds, groups)
    # Group b holds the only line of its group; group a's lines are predicted by a model fitted on "go on"
    # alone (one kind): no signal, so exactly 0.5.
    assert out[:8].tolist() == [0.5] * 8
    assert out[8] != 0.5


def test_standalone_requests_teach_full_requests_and_keep_their_share(fast_classifier) -> None:
    """Single-turn requests as extra negatives: a short self-contained question (the sampled turns never show
    one) reads less as a follow-up, and its share of the negative weight is what sets how much."""
    vectorizer = fast_classifier.artifact.fast.vectorizer
    texts, labels = FOLLOW_UPS + REQUESTS, np.array([1] * 4 + [0] * 4)
    standalone = ["Is it going to rain tomorrow?", "Will it snow in Oslo this weekend?", "Is it cold in Paris today?"]
    probe = ["Is it going to rain in Madrid tomorrow?"]
    alone = followup.fit(vectorizer, texts, labels).probabilities(vectorizer, probe)[0]
    little = followup.fit(vectorizer, texts, labels, standalone=standalone, standalone_share=0.1)
    more = followup.fit(vectorizer, texts, labels, standalone=standalone, standalone_share=0.7)
    assert more.probabilities(vectorizer, probe)[0] < little.probabilities(vectorizer, probe)[0] < alone
    # A text already among the labelled turns keeps its label: no double count, no flipped example.
    same = followup.fit(vectorizer, texts, labels, standalone=FOLLOW_UPS[:1], standalone_share=0.5)
    np.testing.assert_allclose(same.weights, followup.fit(vectorizer, texts, labels).weights)


def test_out_of_fold_leaves_out_the_held_out_groups_standalone_requests(fast_classifier) -> None:
    """A held-out repository's single-turn requests are not negatives of the model that scores its lines."""
    vectorizer = fast_classifier.artifact.fast.vectorizer
    texts = FOLLOW_UPS + ["go on", "Set an alarm for 6 am"]
    kinds = ["stay"] * 5 + ["switch"]
    groups = np.array(["a"] * 5 + ["b"])
    # Group b's only negative is its own line. With the standalone request in b too, b's model (fitted on a's
    # follow-ups alone) has no negative: flat 0.5. The same request from repository a is a negative for it.
    own = followup.out_of_fold(vectorizer, texts, kinds, groups, standalone=["Book a table for two"],
                               standalone_groups=["b"], standalone_share=0.5)
    assert own[5] == 0.5
    other = followup.out_of_fold(vectorizer, texts, kinds, groups, standalone=["Book a table for two"],
                                 standalone_groups=["a"], standalone_share=0.5)
    assert other[5] != 0.5
    assert own[:5].tolist() == other[:5].tolist() == [0.5] * 5  # a's model: negatives only, either way


def test_artifact_trained_before_a_feature_decides_as_before(fast_classifier) -> None:
    payload = fast_classifier.artifact.to_payload()
    keep = [i for i, name in enumerate(FEATURES) if not name.startswith("followup_")]
    payload["turn"] = {**payload["turn"], "features": [FEATURES[i] for i in keep],
                       "theta": payload["turn"]["theta"][:, keep]}
    payload["followup"] = None
    old = Artifact.from_payload(payload)
    assert old.followup is None
    inputs = TurnInputs(p_last=np.array([0.1, 0.2, 0.6, 0.1]), p_history=np.array([0.7, 0.1, 0.1, 0.1]),
                        session=0, last_words=3, followup=0.0)
    np.testing.assert_allclose(old.turn.probabilities(inputs), fast_classifier.artifact.turn.probabilities(inputs))


def test_artifact_with_an_unknown_conversation_feature_is_a_clear_error(fast_classifier) -> None:
    payload = fast_classifier.artifact.to_payload()
    theta = payload["turn"]["theta"]
    payload["turn"] = {**payload["turn"], "features": list(FEATURES) + ["from_the_future"],
                       "theta": np.concatenate([theta, np.zeros((theta.shape[0], 1))], axis=1)}
    with pytest.raises(ArtifactError, match="from_the_future"):
        Artifact.from_payload(payload)


def test_form_cues_read_length_shortness_pointing_back_and_a_question() -> None:
    short = followup.form_cues("why is that?")
    long = followup.form_cues("Set an alarm for 6:30 tomorrow morning and remind me to call the dentist.")
    assert dict(zip(followup.CUES, short.tolist())) == pytest.approx(
        {"log_words": np.log(4.0), "short": 1 - 3 / 8, "points_back": 0.5 * (1 - 3 / 25), "question": 1.0,
         "function_words": 1.0 * (1 - 3 / 25)})  # why, is, that: all function words
    assert long[0] > short[0] and long[1] == 0.0 and long[2] == 0.0 and long[3] == 0.0
    # a request names its task (alarm, tomorrow, remind, dentist, ...): under half function words, and long
    assert long[4] < 0.5 * short[4]
    assert followup.function_words("so what should I do?") > followup.function_words("set an alarm") > 0
    assert followup.function_words("") == 0.0


def test_fit_learns_the_form_of_a_follow_up_beyond_its_words(fast_classifier) -> None:
    """Follow-ups and requests with no shared words: only the form cues can tell unseen ones apart."""
    vectorizer = fast_classifier.artifact.fast.vectorizer
    model = followup.fit(vectorizer, FOLLOW_UPS + REQUESTS, np.array([1] * 4 + [0] * 4))
    assert model.cue_weights[followup.CUES.index("short")] > 0
    assert model.cue_weights[followup.CUES.index("log_words")] < 0
    without = followup.fit(vectorizer, FOLLOW_UPS + REQUESTS, np.array([1] * 4 + [0] * 4), cue_scale=0.0)
    assert without.cue_weights.tolist() == [0.0] * len(followup.CUES)


def test_artifact_written_before_the_form_cues_decides_as_before(fast_classifier) -> None:
    """An artifact's follow-up model without `cue_weights` loads with the cues weighing 0: its probability is the
    TF-IDF-only one, and a conversation gets the same decision as with every cue weight zeroed."""
    payload = fast_classifier.artifact.to_payload()
    payload["followup"] = {"weights": payload["followup"]["weights"], "bias": payload["followup"]["bias"]}
    old = Artifact.from_payload(payload)
    assert old.followup is not None and old.followup.cue_weights.tolist() == [0.0] * len(followup.CUES)
    vectorizer = old.fast.vectorizer
    for text in FOLLOW_UPS + REQUESTS:
        x = vectorizer.transform_many([analyze(text)])
        by_hand = 1 / (1 + np.exp(-(float(np.asarray(x @ old.followup.weights).ravel()[0]) + old.followup.bias)))
        assert old.followup.probability(old.fast.featurizer, text) == pytest.approx(by_hand, abs=1e-9)
    zeroed = Artifact.from_payload(fast_classifier.artifact.to_payload())
    zeroed.followup.cue_weights = np.zeros(len(followup.CUES))
    settings = fast_classifier.settings
    messages = [{"role": "user", "content": "Write a SQL query that lists the ten largest orders."},
                {"role": "assistant", "content": "SELECT * FROM orders ORDER BY total DESC LIMIT 10;"},
                {"role": "user", "content": "why that one?"}]
    a = SpecialistClassifier(old, settings).classify(messages=messages, session="code")
    b = SpecialistClassifier(zeroed, settings).classify(messages=messages, session="code")
    assert a.probabilities == pytest.approx(b.probabilities, abs=1e-12)


def test_artifact_with_an_unknown_form_cue_is_a_clear_error(fast_classifier) -> None:
    payload = fast_classifier.artifact.to_payload()
    payload["followup"] = {**payload["followup"], "cues": ["from_the_future"], "cue_weights": np.ones(1)}
    with pytest.raises(ArtifactError, match="from_the_future"):
        Artifact.from_payload(payload)


def _embedding_input(texts: list[str], max_words: int = 6) -> followup.EmbeddingInput:
    """A made-up 2-d embedding: the first axis says "follow-up", the second "request" (what the encoder's
    geometry gives the real model)."""
    vectors = {t: np.array([1.0, 0.0]) if t in FOLLOW_UPS or t == "what do you mean?" else np.array([0.0, 1.0])
               for t in followup.short_texts(texts, max_words)}
    return followup.EmbeddingInput(vectors=vectors, max_words=max_words, dims=2, scale=2.0)


def test_fit_with_embeddings_reads_them_for_short_turns_only(fast_classifier) -> None:
    vectorizer = fast_classifier.artifact.fast.vectorizer
    texts = FOLLOW_UPS + REQUESTS
    labels = np.array([1] * 4 + [0] * 4)
    model = followup.fit(vectorizer, texts, labels, embedding=_embedding_input(texts + ["what do you mean?"]))
    assert model.embedding_weights is not None and model.max_embedded_words == 6
    assert model.embedding_weights[0] > model.embedding_weights[1]  # the "follow-up" direction raises it
    idx, val = fast_classifier.artifact.fast.featurizer.transform("what do you mean?")
    without = model.probability_of(idx, val, "what do you mean?")
    with_embedding = model.probability_of(idx, val, "what do you mean?", np.array([1.0, 0.0]))
    assert with_embedding > without
    # A turn longer than max_embedded_words reads no embedding, whatever is passed (as in training).
    long_turn = REQUESTS[0]
    assert not model.wants_embedding(long_turn)
    idx, val = fast_classifier.artifact.fast.featurizer.transform(long_turn)
    assert model.probability_of(idx, val, long_turn, np.array([1.0, 0.0])) == model.probability_of(idx, val, long_turn)
    # The batch path (training) and the one-text path (serving) agree.
    embedding_of = {"why?": np.array([1.0, 0.0])}
    batch = model.probabilities(vectorizer, ["why?", long_turn], embedding_of)
    one = [model.probability_of(*fast_classifier.artifact.fast.featurizer.transform(t), t, embedding_of.get(t))
           for t in ("why?", long_turn)]
    np.testing.assert_allclose(batch, one, atol=1e-6)


def test_embedding_follow_up_model_survives_the_artifact_round_trip(fast_classifier) -> None:
    vectorizer = fast_classifier.artifact.fast.vectorizer
    texts = FOLLOW_UPS + REQUESTS
    model = followup.fit(vectorizer, texts, np.array([1] * 4 + [0] * 4), embedding=_embedding_input(texts))
    artifact = Artifact.from_payload(fast_classifier.artifact.to_payload())
    artifact.followup_embedded = model
    loaded = Artifact.from_payload(artifact.to_payload())
    assert loaded.followup_embedded is not None and loaded.followup_embedded.max_embedded_words == 6
    np.testing.assert_allclose(loaded.followup_embedded.embedding_weights, model.embedding_weights)
    np.testing.assert_allclose(loaded.followup_embedded.cue_weights, model.cue_weights)
    # Written without it (every artifact before this model): the TF-IDF follow-up model alone, as before.
    payload = fast_classifier.artifact.to_payload()
    payload.pop("followup_embedded", None)
    assert Artifact.from_payload(payload).followup_embedded is None


def test_without_the_encoder_the_tfidf_follow_up_model_answers(fast_classifier) -> None:
    """Escalation off (or an encoder not ready, or escalate=False) never waits for an embedding: the TF-IDF model
    answers a short turn; a turn too long for the embedding model is read by it without one, as it was trained."""
    from macaron.router.classifier import ClassifierSettings

    artifact = Artifact.from_payload(fast_classifier.artifact.to_payload())
    vectorizer = artifact.fast.vectorizer
    texts = FOLLOW_UPS + REQUESTS
    artifact.followup_embedded = followup.fit(vectorizer, texts, np.array([1] * 4 + [0] * 4),
                                              embedding=_embedding_input(texts))
    classifier = SpecialistClassifier(artifact, ClassifierSettings(escalation=False))
    conversation = classifier.conversation(messages=[{"role": "user", "content": REQUESTS[0]},
                                                     {"role": "assistant", "content": "def merge(a, b): ..."},
                                                     {"role": "user", "content": "why?"}])
    assert classifier._embedded_followup(conversation) is None
    idx, val = artifact.fast.featurizer.transform("why?")
    assert classifier._followup(idx, val, "why?") == artifact.followup.probability_of(idx, val, "why?")
    long_turn = REQUESTS[0]
    idx, val = artifact.fast.featurizer.transform(long_turn)
    assert classifier._followup(idx, val, long_turn) == artifact.followup_embedded.probability_of(idx, val, long_turn)
    decision = classifier.classify(messages=[{"role": "user", "content": REQUESTS[0]}, {"role": "user", "content": "why?"}],
                                   session="code")
    assert decision.specialist == "code" and not decision.escalated


def test_a_sure_decision_asks_no_embedding(fast_classifier) -> None:
    """`followup_embedding_below`: the embedding is read only where the decision without it is less sure than the
    setting (0: never); a sure decision costs no encoder call."""
    from macaron.router.classifier import ClassifierSettings

    asked: list[str] = []
    messages = [{"role": "user", "content": REQUESTS[0]}, {"role": "assistant", "content": "def merge(a, b): ..."},
                {"role": "user", "content": "why?"}]
    for below, expect in ((0.0, 0), (1.01, 1)):
        classifier = SpecialistClassifier(fast_classifier.artifact, ClassifierSettings(followup_embedding_below=below))
        classifier._embedded_followup = lambda conversation: asked.append(conversation.last_text)  # returns None
        asked.clear()
        classifier.classify(messages=messages, session="code")
        assert len(asked) == expect, (below, asked)
        asked.clear()
        classifier.classify(messages=messages, session="code", escalate=False)  # the fast path never embeds
        assert asked == []


def test_a_fast_answer_says_whether_the_encoder_could_change_it(fast_classifier) -> None:
    """`refinable` (read by the router before asking again with the encoder): an unsure conversation turn whose
    follow-up model reads its embedding is; a sure single request is not; a call that already used the encoder
    never is."""
    from macaron.router.classifier import ClassifierSettings

    artifact = fast_classifier.artifact
    assert artifact.followup_embedded is not None  # the shipped artifact reads the turn's embedding
    classifier = SpecialistClassifier(artifact, ClassifierSettings())  # escalation on; the encoder never loaded
    messages = [{"role": "user", "content": REQUESTS[0]}, {"role": "assistant", "content": "def merge(a, b): ..."},
                {"role": "user", "content": "what do you mean?"}]
    assert classifier.classify(messages=messages, session="code", escalate=False).refinable
    sure = classifier.classify("Write a Python function that reverses a linked list in place.", escalate=False)
    assert sure.confidence >= classifier.threshold and not sure.refinable
    never = SpecialistClassifier(artifact, ClassifierSettings(followup_embedding_below=0.0, escalation_threshold=0.0))
    assert not never.classify(messages=messages, session="code", escalate=False).refinable
    off = SpecialistClassifier(artifact, ClassifierSettings(escalation=False))
    assert not off.classify(messages=messages, session="code", escalate=False).refinable


def test_a_follow_up_model_fitted_on_the_frozen_encoder_reads_it_beside_a_tuned_one(fast_classifier) -> None:
    """followup.py: with a tuned escalation encoder, the follow-up model reads MiniLM without the routing adapter (a
    second encoder, loaded with the first); fitted on the escalation encoder, or where that one is frozen, there is
    one encoder; an artifact written before the choice reads the escalation encoder, and an unknown one is an error."""
    from macaron.router.classifier import ClassifierSettings

    settings = ClassifierSettings(preload_embedder=False)
    artifact = Artifact.from_payload(fast_classifier.artifact.to_payload())
    vectorizer = artifact.fast.vectorizer
    texts = FOLLOW_UPS + REQUESTS
    frozen = followup.EmbeddingInput(**{**_embedding_input(texts).__dict__, "encoder": followup.FROZEN_ENCODER})
    artifact.followup_embedded = followup.fit(vectorizer, texts, np.array([1] * 4 + [0] * 4), embedding=frozen)
    artifact.adapter_path = fast_classifier.artifact.adapter_path  # the shipped, tuned encoder
    assert artifact.adapter_path is not None
    tuned = SpecialistClassifier(artifact, settings)
    (frozen_encoder,) = tuned.followup_embedders
    assert frozen_encoder is not tuned.embedder and frozen_encoder._adapter is None
    assert tuned.followup_embedders == (frozen_encoder,)  # one frozen encoder per classifier
    untuned = Artifact.from_payload(artifact.to_payload())
    assert untuned.followup_embedded.embedding_encoder == followup.FROZEN_ENCODER
    untuned.adapter = untuned.adapter_path = None
    single = SpecialistClassifier(untuned, settings)
    assert single.followup_embedders == (single.embedder,)
    payload = artifact.to_payload()
    del payload["followup_embedded"]["embedding_encoder"]
    before = Artifact.from_payload(payload)
    assert before.followup_embedded.embedding_encoder == followup.ESCALATION_ENCODER
    before.adapter_path = artifact.adapter_path
    same = SpecialistClassifier(before, settings)
    assert same.followup_embedders == (same.embedder,)
    both = followup.EmbeddingInput(**{**_embedding_input(texts).__dict__, "encoder": followup.BOTH_ENCODERS})
    artifact.followup_embedded = followup.fit(vectorizer, texts, np.array([1] * 4 + [0] * 4), embedding=both)
    side_by_side = SpecialistClassifier(Artifact.from_payload(artifact.to_payload()), settings)
    side_by_side.artifact.adapter_path = artifact.adapter_path
    assert side_by_side.followup_embedders == (side_by_side.embedder, side_by_side.followup_embedders[1])
    assert side_by_side.followup_embedders[1]._adapter is None
    payload["followup_embedded"]["embedding_encoder"] = "another"
    with pytest.raises(ArtifactError, match="encoder this code does not know"):
        Artifact.from_payload(payload)
