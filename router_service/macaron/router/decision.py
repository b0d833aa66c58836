"""Which specialist serves a request, in order: explicit > session > classifier > judge > chat.

Pure functions over plain values (no grpc, no Redis, no engine), so every rule is a table test:

1. **explicit**: the request forces a specialist.
2. **session**: while a tool loop is open (the last assistant turn called tools and the new
   turn carries their results) the session never switches. Otherwise, when the classifier
   weighed the session itself (`Classified.session_aware`: its learned conversation decision
   saw the session's specialist, the earlier turns and the tools), its choice stands: a switch
   when it names another specialist, else the session stays; no second threshold discounts it.
   A classifier that did not see the session gets the older hysteresis: it switches only when
   its top specialist differs with probability >= `switch_threshold` and the newest user turn
   has at least `switch_min_words` words.
3. **classifier**: its top specialist when its confidence is >= `judge_threshold`.
4. **judge**: below that, the L0 chat adapter picks one of the four names on the engine
   (`decide` returns `Unsure`; the caller asks the judge and calls `after_judge`).
5. **fallback**: the judge timed out or failed (or is off): `chat`.

Confidence semantics, per reason: explicit 1.0; session 1 - the strongest other specialist's
probability (1.0 inside a tool loop or without a classifier); classifier its top
probability; judge the classifier's probability of the judge's choice; fallback the
classifier's probability of chat (0 without one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Mapping, Sequence

from macaron.ports import SPECIALISTS
from macaron.prompting import Message

Reason = Literal["explicit", "session", "classifier", "judge", "fallback"]
DEFAULT_SPECIALIST = "chat"


@dataclass(frozen=True, slots=True)
class Classified:
    """What the pipeline needs of the fast classifier's answer."""

    specialist: str
    probabilities: Mapping[str, float]
    confidence: float
    latency_ms: float = 0.0
    session_aware: bool = False  # the classifier's answer already weighs the session's specialist
    # A fast-path answer a call with the classifier's encoder could change (None: the classifier does not say;
    # the router then asks again below the escalation threshold).
    refinable: bool | None = None

    def p(self, name: str) -> float:
        return float(self.probabilities.get(name, 0.0))


@dataclass(frozen=True, slots=True)
class SessionView:
    """What the session remembers: the last specialist, its adapter version and replica."""

    specialist: str
    adapter_version: str = ""
    replica: str = ""
    turns: int = 0


@dataclass(frozen=True, slots=True)
class DecisionPolicy:
    """The pipeline's thresholds (RouterSettings.switch_threshold, switch_min_words, judge_threshold)."""

    switch_threshold: float = 0.8
    judge_threshold: float = 0.5
    switch_min_words: int = 3
    switch_margin: float = 0.1


@dataclass(frozen=True, slots=True)
class Decision:
    """The chosen specialist, why, and how sure."""

    specialist: str
    reason: Reason
    confidence: float
    detail: str = ""
    classified: Classified | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Unsure:
    """The classifier is not confident enough: ask the judge, then call `after_judge`."""

    classified: Classified | None
    detail: str


def newest_user_words(messages: Sequence[Message]) -> int:
    """How many words the newest user turn has (0 without one)."""
    return next((len(m.content.split()) for m in reversed(messages) if m.role == "user"), 0)


def tool_loop_open(messages: Sequence[Message]) -> bool:
    """True when the newest turn carries results of tools the last assistant turn called."""
    i = len(messages) - 1
    if i < 0 or messages[i].role != "tool":
        return False
    while i >= 0 and messages[i].role == "tool":
        i -= 1
    return i >= 0 and messages[i].role == "assistant" and bool(messages[i].tool_calls)


def decide(
    *,
    forced: str | None,
    session: SessionView | None,
    classified: Classified | None,
    tool_loop: bool,
    policy: DecisionPolicy,
    new_turn_words: int | None = None,
) -> Decision | Unsure:
    """Steps 1-3 (and the judge's trigger) of the pipeline; see the module docstring."""
    if forced:
        return Decision(forced, "explicit", 1.0, f"forced to {forced}", classified)
    if session is not None and session.specialist in SPECIALISTS:
        stay = session.specialist
        if tool_loop:
            return Decision(stay, "session", 1.0, f"tool loop open: stays with {stay}", classified)
        if classified is None:
            return Decision(stay, "session", 1.0, f"stays with {stay} (no classifier answer)", None)
        top = classified.specialist
        if classified.session_aware and top in SPECIALISTS:
            if top != stay and classified.p(top) - classified.p(stay) >= policy.switch_margin:
                return Decision(top, "classifier", _unit(classified.p(top)),
                                f"switched from {stay}: the conversation decision chose {top} "
                                f"p={classified.p(top):.2f}", classified)
            why = (f"the conversation decision agrees p={classified.p(stay):.2f}" if top == stay else
                   f"{top} p={classified.p(top):.2f} is within {policy.switch_margin:.2f} of {stay} "
                   f"p={classified.p(stay):.2f}")
            return Decision(stay, "session", _unit(classified.p(stay)), f"stays with {stay}: {why}", classified)
        long_enough = new_turn_words is None or new_turn_words >= policy.switch_min_words
        if top != stay and classified.p(top) >= policy.switch_threshold and long_enough:
            return Decision(
                top, "classifier", classified.p(top),
                f"switched from {stay}: {top} p={classified.p(top):.2f} >= {policy.switch_threshold:.2f}", classified,
            )
        strongest_other = max((classified.p(n) for n in SPECIALISTS if n != stay), default=0.0)
        if top == stay:
            why = "the classifier agrees"
        elif not long_enough:
            why = f"the new turn is too short to switch ({new_turn_words} < {policy.switch_min_words} words)"
        else:
            why = f"{top} p={classified.p(top):.2f} < switch {policy.switch_threshold:.2f}"
        return Decision(stay, "session", _unit(1.0 - strongest_other), f"stays with {stay}: {why}", classified)
    if classified is None:
        return Unsure(None, "no classifier answer")
    if classified.confidence >= policy.judge_threshold and classified.specialist in SPECIALISTS:
        return Decision(
            classified.specialist, "classifier", _unit(classified.confidence),
            f"classifier p={classified.confidence:.2f}", classified,
        )
    return Unsure(classified, f"classifier unsure: {classified.specialist} p={classified.confidence:.2f} "
                              f"< {policy.judge_threshold:.2f}")


def after_judge(unsure: Unsure, answer: str | None, why_not: str = "") -> Decision:
    """Step 4-5: the judge's answer (one of the four names), else chat as the fallback."""
    c = unsure.classified
    if answer in SPECIALISTS:
        return Decision(answer, "judge", _unit(c.p(answer)) if c else 0.0, f"{unsure.detail}; judge chose {answer}", c)
    return Decision(
        DEFAULT_SPECIALIST, "fallback", _unit(c.p(DEFAULT_SPECIALIST)) if c else 0.0,
        f"{unsure.detail}; judge {why_not or 'gave no answer'}: {DEFAULT_SPECIALIST}", c,
    )


def _unit(x: float) -> float:
    return min(1.0, max(0.0, float(x)))
