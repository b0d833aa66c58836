"""The decision pipeline, rule by rule: explicit > session (hysteresis, tool loops) > classifier > judge > chat."""

from __future__ import annotations

import pytest

from macaron.prompting import Message, ToolCall
from macaron.router.decision import (
    Classified,
    Decision,
    DecisionPolicy,
    SessionView,
    Unsure,
    after_judge,
    decide,
    tool_loop_open,
)

POLICY = DecisionPolicy(switch_threshold=0.8, judge_threshold=0.5, switch_min_words=3)


def cls(top: str, p: float) -> Classified:
    rest = (1.0 - p) / 3
    probs = {n: (p if n == top else rest) for n in ("chat", "agent", "code", "ui")}
    return Classified(top, probs, p)


@pytest.mark.parametrize(
    ("forced", "session", "classified", "tool_loop", "words", "expected"),
    [
        # explicit wins over everything
        ("ui", SessionView("code"), cls("agent", 0.99), True, 6, ("ui", "explicit", 1.0)),
        # no session: the classifier when confident
        (None, None, cls("code", 0.9), False, 6, ("code", "classifier", 0.9)),
        (None, None, cls("code", 0.5), False, 1, ("code", "classifier", 0.5)),
        # session: stays unless another specialist reaches the switch threshold
        (None, SessionView("code"), cls("chat", 0.79), False, 6, ("code", "session", pytest.approx(0.21))),
        (None, SessionView("code"), cls("chat", 0.8), False, 6, ("chat", "classifier", 0.8)),
        (None, SessionView("code"), cls("code", 0.3), False, 6, ("code", "session", pytest.approx(1 - 0.7 / 3))),
        # ... and a continuation too short to carry a domain never switches, however confident the classifier
        (None, SessionView("code"), cls("chat", 0.95), False, 2, ("code", "session", pytest.approx(0.05))),
        (None, SessionView("code"), cls("chat", 0.95), False, 3, ("chat", "classifier", 0.95)),
        # ... nor inside an open tool loop
        (None, SessionView("agent"), cls("chat", 0.99), True, 6, ("agent", "session", 1.0)),
        (None, SessionView("agent"), None, True, 6, ("agent", "session", 1.0)),
        # a session without a classifier answer stays
        (None, SessionView("ui"), None, False, 6, ("ui", "session", 1.0)),
        # a corrupt session is ignored
        (None, SessionView("nonsense"), cls("code", 0.9), False, 6, ("code", "classifier", 0.9)),
    ],
)
def test_decision_table(forced, session, classified, tool_loop, words, expected) -> None:
    d = decide(forced=forced, session=session, classified=classified, tool_loop=tool_loop, policy=POLICY,
               new_turn_words=words)
    assert isinstance(d, Decision)
    assert (d.specialist, d.reason, d.confidence) == expected
    assert d.detail


def aware(top: str, p: float) -> Classified:
    c = cls(top, p)
    return Classified(c.specialist, c.probabilities, c.confidence, session_aware=True)


@pytest.mark.parametrize(
    ("session", "classified", "tool_loop", "words", "expected"),
    [
        # the conversation decision already weighed the session: its choice stands, no second threshold
        (SessionView("code"), aware("agent", 0.55), False, 6, ("agent", "classifier", 0.55)),
        (SessionView("code"), aware("chat", 0.9), False, 2, ("chat", "classifier", 0.9)),
        (SessionView("code"), aware("code", 0.4), False, 1, ("code", "session", 0.4)),
        # ... but an open tool loop still never switches
        (SessionView("agent"), aware("code", 0.99), True, 6, ("agent", "session", 1.0)),
        # ... and a near tie with the session's own specialist is no confident switch: it stays
        (SessionView("ui"), Classified("chat", {"chat": 0.33, "agent": 0.23, "code": 0.12, "ui": 0.32}, 0.33,
                                       session_aware=True), False, 5, ("ui", "session", 0.32)),
    ],
)
def test_session_aware_classifier_decides_once(session, classified, tool_loop, words, expected) -> None:
    d = decide(forced=None, session=session, classified=classified, tool_loop=tool_loop, policy=POLICY,
               new_turn_words=words)
    assert isinstance(d, Decision)
    assert (d.specialist, d.reason, d.confidence) == expected


def test_unsure_classifier_asks_the_judge_then_falls_back_to_chat() -> None:
    unsure = decide(forced=None, session=None, classified=cls("ui", 0.4), tool_loop=False, policy=POLICY)
    assert isinstance(unsure, Unsure)
    judged = after_judge(unsure, "code")
    assert (judged.specialist, judged.reason) == ("code", "judge")
    assert judged.confidence == pytest.approx(0.2)
    fallback = after_judge(unsure, None, "timed out")
    assert (fallback.specialist, fallback.reason) == ("chat", "fallback")
    assert "timed out" in fallback.detail
    assert after_judge(unsure, "pizza").reason == "fallback"
    no_classifier = decide(forced=None, session=None, classified=None, tool_loop=False, policy=POLICY)
    assert isinstance(no_classifier, Unsure)
    assert after_judge(no_classifier, None).confidence == 0.0


CALL = ToolCall("c1", "get_weather", "{}")


@pytest.mark.parametrize(
    ("roles", "expected"),
    [
        ([Message("user", "hi")], False),
        ([Message("user", "hi"), Message("assistant", "", tool_calls=(CALL,)), Message("tool", "{}", tool_call_id="c1")], True),
        ([Message("user", "hi"), Message("assistant", "", tool_calls=(CALL, CALL)),
          Message("tool", "1", tool_call_id="c1"), Message("tool", "2", tool_call_id="c1")], True),
        # the loop closed: the assistant answered, the user wrote again
        ([Message("assistant", "", tool_calls=(CALL,)), Message("tool", "{}"), Message("assistant", "sunny"),
          Message("user", "thanks")], False),
        # a tool message without a calling assistant turn is no loop
        ([Message("user", "hi"), Message("tool", "{}")], False),
        ([], False),
    ],
)
def test_tool_loop_detection(roles, expected) -> None:
    assert tool_loop_open(roles) is expected
