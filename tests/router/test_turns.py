"""The conversation decision's features (turns.py): how sure the follow-up model is beyond SURE_FOLLOWUP, the last
turn's log-probability floored at LAST_TURN_FLOOR, read no lower than LAST_TURN_MIN_P and set aside as the follow-up
model grows sure (`followup_gate`), and artifacts written before those features."""

from __future__ import annotations

import numpy as np
import pytest

from macaron.router.classifier.model import Artifact, softmax
from macaron.router.classifier.turns import (
    BEFORE_GATE, FEATURES, FOLLOWUP_GATE_FROM, LAST_TURN_FLOOR, LAST_TURN_MIN_P, SURE_FOLLOWUP, LastTurnReading,
    TurnInputs, TurnModel, feature_tensor, followup_gate, sure_followup,
)

# every column built from the last turn's own log-probability
LAST_TURN_COLUMNS = ("log_p_last", "short_x_log_p_last", "refers_back_x_log_p_last", "followup_x_log_p_last",
                     "sure_followup_x_log_p_last", "floored_log_p_last")
NEW = ("sure_followup_x_is_session", "sure_followup_x_log_p_last", "sure_followup_x_log_p_history", "floored_log_p_last")


def _inputs(followup: float, p_last=(0.001, 0.05, 0.149, 0.8)) -> TurnInputs:
    return TurnInputs(p_last=np.array(p_last), p_history=np.array([0.7, 0.1, 0.1, 0.1]),
                      session=0, last_words=6, followup=followup)


def test_sure_followup_is_zero_up_to_the_knee_and_one_at_certainty() -> None:
    assert sure_followup(0.0) == sure_followup(SURE_FOLLOWUP) == 0.0
    assert sure_followup(1.0) == pytest.approx(1.0)
    assert sure_followup(0.85) == pytest.approx((0.85 - SURE_FOLLOWUP) / (1 - SURE_FOLLOWUP))


def test_sure_follow_up_weighs_session_last_turn_and_history() -> None:
    inputs = _inputs(0.94)
    phi = feature_tensor(inputs)
    sure = (0.94 - SURE_FOLLOWUP) / (1 - SURE_FOLLOWUP)
    read = 1.0 - followup_gate(0.94)
    np.testing.assert_allclose(phi[:, FEATURES.index("sure_followup_x_is_session")], [sure, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(phi[:, FEATURES.index("sure_followup_x_log_p_last")],
                               read * sure * np.log(np.maximum(inputs.p_last, LAST_TURN_MIN_P)))
    np.testing.assert_allclose(phi[:, FEATURES.index("sure_followup_x_log_p_history")], sure * np.log(inputs.p_history))
    # an unsure follow-up model adds nothing beyond its plain features
    assert not feature_tensor(_inputs(0.6))[:, [FEATURES.index(n) for n in NEW[:3]]].any()


def test_last_turn_log_probability_enters_floored_beside_the_plain_one() -> None:
    inputs = _inputs(0.0)
    phi = feature_tensor(inputs)
    np.testing.assert_allclose(phi[:, FEATURES.index("log_p_last")], np.log([LAST_TURN_MIN_P, 0.05, 0.149, 0.8]))
    np.testing.assert_allclose(phi[:, FEATURES.index("floored_log_p_last")],
                               np.log([LAST_TURN_FLOOR, 0.05, 0.149, 0.8]))


def test_followup_gate_is_zero_up_to_its_start_and_one_at_certainty() -> None:
    assert followup_gate(0.0) == followup_gate(FOLLOWUP_GATE_FROM) == 0.0
    assert followup_gate(1.0) == pytest.approx(1.0)
    assert followup_gate(0.9) == pytest.approx((0.9 - FOLLOWUP_GATE_FROM) / (1 - FOLLOWUP_GATE_FROM))


@pytest.mark.parametrize("followup", [0.3, 0.75, 0.9, 1.0])
def test_a_sure_follow_ups_own_reading_is_set_aside_in_every_column(followup: float) -> None:
    """Every column built from the last turn's log-probability is multiplied by 1 - followup_gate: gating only the
    plain reading let the fit give it back through the interactions (classifier README). The history's are not."""
    inputs = _inputs(followup)
    phi = feature_tensor(inputs)
    read, short = 1.0 - followup_gate(followup), 1.0 - 6 / 8
    log_last = np.log(np.maximum(inputs.p_last, LAST_TURN_MIN_P))
    expected = {
        "log_p_last": log_last, "short_x_log_p_last": short * log_last, "refers_back_x_log_p_last": 0.0 * log_last,
        "followup_x_log_p_last": followup * log_last, "sure_followup_x_log_p_last": sure_followup(followup) * log_last,
        "floored_log_p_last": np.maximum(log_last, np.log(LAST_TURN_FLOOR)),
    }
    assert set(expected) == set(LAST_TURN_COLUMNS)
    for name, column in expected.items():
        np.testing.assert_allclose(phi[:, FEATURES.index(name)], read * column, err_msg=name)
    np.testing.assert_allclose(phi[:, FEATURES.index("log_p_history")], np.log(inputs.p_history))
    np.testing.assert_allclose(phi[:, FEATURES.index("followup_x_log_p_history")], followup * np.log(inputs.p_history))
    if followup == 1.0:  # surely a follow-up: nothing of its own reading is left
        assert not phi[:, [FEATURES.index(n) for n in LAST_TURN_COLUMNS]].any()


def test_a_reading_under_the_minimum_counts_as_the_minimum() -> None:
    """The fast model's 1e-5 for `code` on "what do you mean?" vetoes a code session no more than LAST_TURN_MIN_P."""
    tiny = feature_tensor(_inputs(0.0, p_last=(1e-5, 0.05, 0.15, 0.79999)))
    at_min = feature_tensor(_inputs(0.0, p_last=(LAST_TURN_MIN_P, 0.05, 0.15, 0.79999)))
    np.testing.assert_allclose(tiny, at_min)


def test_a_floored_last_turn_cannot_veto_the_history_alone() -> None:
    """Weights on the floored log-probability only: a near-zero reading of the history's specialist costs no more
    than one of LAST_TURN_FLOOR, so the history decides; on the plain log-probability it would be vetoed."""
    inputs = TurnInputs(p_last=np.array([0.0005, 0.33, 0.3345, 0.335]), p_history=np.array([0.97, 0.01, 0.01, 0.01]),
                        session=None, last_words=5)
    for name, expected in (("floored_log_p_last", 0), ("log_p_last", 3)):
        theta = np.zeros((2, len(FEATURES)))
        theta[:, FEATURES.index(name)] = 1.0
        theta[:, FEATURES.index("log_p_history")] = 1.0
        assert TurnModel(theta=theta).probabilities(inputs).argmax() == expected, name


def test_the_session_weighs_apart_when_it_is_all_there_is_of_the_past() -> None:
    lone = TurnInputs(p_last=np.array([0.2, 0.6, 0.1, 0.1]), p_history=None, session=3, last_words=5)
    resent = TurnInputs(p_last=lone.p_last, p_history=np.array([0.1, 0.1, 0.1, 0.7]), session=3, last_words=5)
    column = FEATURES.index("lone_x_is_session")
    np.testing.assert_allclose(feature_tensor(lone)[:, column], [0.0, 0.0, 0.0, 1.0])
    assert not feature_tensor(resent)[:, column].any()
    no_session = TurnInputs(p_last=lone.p_last, p_history=None, session=None, last_words=5)
    assert not feature_tensor(no_session)[:, column].any()


def test_the_history_weighs_apart_when_no_session_is_known() -> None:
    """A client that resends its conversation but keeps no session id: the earlier turns are all that speaks for
    the past, so their log-probability enters again on its own column, and only then."""
    p_last, p_hist = np.array([0.7, 0.1, 0.1, 0.1]), np.array([0.05, 0.05, 0.85, 0.05])
    column = FEATURES.index("no_session_x_log_p_history")
    bare = TurnInputs(p_last=p_last, p_history=p_hist, session=None, last_words=4)
    np.testing.assert_allclose(feature_tensor(bare)[:, column], np.log(p_hist))
    for other in (TurnInputs(p_last=p_last, p_history=p_hist, session=2, last_words=4),
                  TurnInputs(p_last=p_last, p_history=None, session=None, last_words=4)):
        assert not feature_tensor(other)[:, column].any()


def test_artifact_written_before_these_features_decides_as_before(fast_classifier) -> None:
    """An artifact without them loads with their weights at 0."""
    payload = fast_classifier.artifact.to_payload()
    keep = [i for i, name in enumerate(FEATURES) if name not in NEW]
    payload["turn"] = {**payload["turn"], "features": [FEATURES[i] for i in keep],
                       "theta": payload["turn"]["theta"][:, keep]}
    old = Artifact.from_payload(payload)
    dropped = [FEATURES.index(n) for n in NEW]
    np.testing.assert_array_equal(old.turn.theta[:, dropped], 0.0)
    theta = fast_classifier.artifact.turn.theta.copy()
    theta[:, dropped] = 0.0
    for followup in (0.0, 0.5, 0.95):
        np.testing.assert_allclose(old.turn.probabilities(_inputs(followup)),
                                   TurnModel(theta=theta, reading=old.turn.reading).probabilities(_inputs(followup)))
    # the shipped artifact was trained with them, and they move a sure follow-up's decision
    assert np.abs(fast_classifier.artifact.turn.theta[:, dropped]).min() > 0.0
    assert not np.allclose(old.turn.probabilities(_inputs(0.95)),
                           fast_classifier.artifact.turn.probabilities(_inputs(0.95)))


@pytest.mark.parametrize("follow_up", ["how sure are you about that?", "can you explain that in more detail?"])
def test_a_sure_follow_up_read_as_chat_stays_in_its_session(fast_classifier, follow_up: str) -> None:
    """Written follow-ups of the dev half (never trained on): the fast model reads them as `chat`, the follow-up
    model as follow-ups; the previous decision left the `ui` session for `chat` (0.79, 0.69). "hmm, are you sure?"
    (0.63 then) is read near a coin flip by the fast path alone (`ui` 0.57 with Ys, 0.46 with G, `chat` 0.50 with
    the shipped G3) and surely once the encoders are loaded (0.86, 0.87, 0.91), so it is held where the router
    serves it, with the encoders (test_classifier_offline.py)."""
    messages = [{"role": "user", "content": "Build a signup form with email and password fields and a submit button."},
                {"role": "assistant", "content": "Here it is."},
                {"role": "user", "content": follow_up}]
    d = fast_classifier.classify(messages=messages, session="ui")
    assert d.specialist == "ui", d.probabilities


def test_the_last_turns_reading_travels_with_the_artifact(fast_classifier) -> None:
    """The shipped artifact stores how it read the last turn; one written before that was fitted without the gate
    and the minimum, and decides as it was fitted."""
    payload = fast_classifier.artifact.to_payload()
    assert Artifact.from_payload(payload).turn.reading == fast_classifier.artifact.turn.reading == LastTurnReading()
    older = {**payload, "turn": {k: v for k, v in payload["turn"].items()
                                 if k not in ("last_turn_min_p", "followup_gate_from")}}
    old = Artifact.from_payload(older).turn
    assert old.reading == BEFORE_GATE
    inputs = _inputs(0.95, p_last=(1e-5, 0.05, 0.15, 0.79999))
    np.testing.assert_allclose(old.probabilities(inputs), softmax(feature_tensor(inputs, reading=BEFORE_GATE) @ old.theta[0]))
    assert not np.allclose(old.probabilities(inputs), fast_classifier.artifact.turn.probabilities(inputs))
