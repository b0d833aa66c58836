"""The conversation decision: one learned model over a conversation's features.

For every candidate specialist k the model scores
    θ · φ_k(last turn, earlier turns, session, tools)
and a softmax over the four gives the decision. φ_k holds the calibrated log-probability of k
for the last user turn alone and for the earlier turns (mixed), both also scaled by how short the
last turn is (a three-word follow-up says little), whether k is the session's current specialist
(alone, scaled by shortness and by how unsure the last turn is), how much the last turn leans on the
conversation (referring words, the follow-up model's probability and how sure it is beyond 0.7, each on
the session, the last turn and the history), the last turn's log-probability floored at log 0.02 beside
the plain one (every reading of the last turn held no lower than log 0.003 and set aside as the
follow-up model grows sure beyond 0.6: `LastTurnReading`), whether the session is all there is of the
past (the new turn alone, its history not resent), the history's log-probability again when no session is known (the history is then all there is of
the past), declared tools and tool activity for `agent`, and a bias per specialist. The weights
are fitted on multi-turn conversations of the kinds stay / continue / switch / tool loop
(multiturn_data.py), so stickiness, the weight of history and the pull of declared tools are learned
from data instead of hand-set, and they are applied once, here (the router adds no threshold of its own).

A tool loop that is open in a conversation with a session is not scored: it stays with the
session's specialist (a hard rule; the results of a tool say nothing about the next specialist).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from macaron.router.classifier.data import LABELS

SHORT_TURN_WORDS = 8
# Words by which a turn points back at the conversation ("make it shorter", "rewrite your previous
# response", "do the same for that one"); how much they count is learned.
REFERRING_WORDS = frozenset(
    "it its that this those these them they previous above earlier again same instead rest other "
    "your yours before last more shorter longer simpler".split()
)
FEATURES = (
    "log_p_last", "log_p_history", "short_x_log_p_history", "short_x_log_p_last",
    "is_session", "short_x_is_session", "unsure_last_x_is_session",
    "tools_declared_x_agent", "tool_activity_x_agent",
    "refers_back_x_is_session", "refers_back_x_log_p_last", "refers_back_x_log_p_history",
    "followup_x_is_session", "followup_x_log_p_last", "followup_x_log_p_history",
    "sure_followup_x_is_session", "sure_followup_x_log_p_last", "sure_followup_x_log_p_history",
    "floored_log_p_last", "lone_x_is_session", "no_session_x_log_p_history",
) + tuple(f"bias_{label}" for label in LABELS)
N_BIAS = FEATURES.index(f"bias_{LABELS[0]}")  # the per-specialist biases come last
# A follow-up probability above SURE_FOLLOWUP counts again, rising from 0 there to 1 at 1 (`sure_followup`): a
# linear weight on the probability could not make a sure follow-up outweigh a confident last turn without
# also pulling unsure ones back into the conversation.
SURE_FOLLOWUP = 0.7
# The last turn's log-probability also enters floored at log(LAST_TURN_FLOOR): a near-zero probability of the
# fast model (0.002 for `ui` on "make it a bit nicer") rules a specialist out no more than a small one does.
LAST_TURN_FLOOR = 0.02
LOG_LAST_TURN_FLOOR = float(np.log(LAST_TURN_FLOOR))
# The last turn's probabilities are read no lower than LAST_TURN_MIN_P anywhere: the fast model is confidently wrong
# on turns that carry no domain ("what do you mean?" as `chat` at 0.999, so `code` at 1e-5), and a log-probability
# of -11 outweighed everything the session and the history said. Chosen held out (classifier README, revision T):
# with the gate from 0.6, 0.001 gave stays / switches 0.933 / 0.784 against 0.932 / 0.788 at 0.003; with it from 0.7,
# 0.01 gave 0.928 / 0.791 against 0.931 / 0.785.
LAST_TURN_MIN_P = 0.003
# The last turn's reading is set aside as the follow-up model grows sure: every column built from the last turn's
# log-probability is multiplied by 1 - `followup_gate`, which is 0 up to FOLLOWUP_GATE_FROM and 1 at 1. "why?" read
# as `chat` at 0.99 says nothing about a code session once the turn is surely a follow-up. The interactions are gated
# too: gating only the plain reading let the fit give it back through them.
FOLLOWUP_GATE_FROM = 0.6
STAGES = ("fast", "escalated")  # one weight vector per stage: the embedding model errs differently


@dataclass(frozen=True, slots=True)
class LastTurnReading:
    """How the last turn's probabilities enter the features: held no lower than `min_p`, and set aside by
    `followup_gate` from `gate_from` on (None: never). Stored with the conversation model, so an artifact fitted
    before the gate (`BEFORE_GATE`) keeps deciding as it was fitted."""

    min_p: float = LAST_TURN_MIN_P
    gate_from: float | None = FOLLOWUP_GATE_FROM

    def read(self, followup: float) -> float:
        """The share of the last turn's own reading that counts."""
        return 1.0 if self.gate_from is None else 1.0 - followup_gate(followup, self.gate_from)


BEFORE_GATE = LastTurnReading(min_p=1e-6, gate_from=None)


@dataclass(frozen=True, slots=True)
class TurnInputs:
    """What the conversation decision reads (probabilities are calibrated, over LABELS)."""

    p_last: np.ndarray
    p_history: np.ndarray | None
    session: int | None  # index into LABELS
    last_words: int
    has_tools: bool = False
    tool_activity: bool = False
    refers_back: float = 0.0
    followup: float = 0.0  # the follow-up model's probability that the last turn leans on the conversation


def refers_back(text: str) -> float:
    """How much a turn reads as pointing back: referring words, fading out for long turns (0..1)."""
    words = [w.strip(".,!?;:'\"()").lower() for w in text.split()]
    cues = sum(w in REFERRING_WORDS for w in words)
    return min(1.0, cues / 2.0) * max(0.0, 1.0 - len(words) / 25.0)


def gated_choice(probs: np.ndarray, session: int | None, min_switch_confidence: float,
                 min_session_probability: float = 0.0) -> int:
    """The specialist a session's turn goes to: the decision's top one, except that the session is left only for a
    specialist at least `min_switch_confidence` likely, unless the decision gives the session's own specialist less
    than `min_session_probability` (off by default: measured, it trades ambiguous stays for unsure switches one for
    one). Why the second clause: "What is my user name?" after a page was built, in a `ui` session, read `agent` 0.49
    and `ui` 0.20; an unsure top choice should not move a conversation, but a session the decision all but rules
    out is not a safe place to stay either."""
    best = int(np.argmax(probs))
    if session is None or best == session or probs[best] >= min_switch_confidence:
        return best
    return best if probs[session] < min_session_probability else session


def may_escalate(inputs: TurnInputs) -> bool:
    """Whether an unsure conversation decision may ask the embedding model. Not for a short turn
    in a session: a few words carry little domain, and MiniLM is confidently wrong on them ("Turn 1,
    go on" reads as agent), so the fast stage's weighing of session and history decides."""
    return inputs.session is None or inputs.last_words >= SHORT_TURN_WORDS


def sure_followup(followup: float) -> float:
    """How far the follow-up model's probability lies beyond SURE_FOLLOWUP, 0 up to it and 1 at 1."""
    return max(0.0, followup - SURE_FOLLOWUP) / (1.0 - SURE_FOLLOWUP)


def followup_gate(followup: float, start: float = FOLLOWUP_GATE_FROM) -> float:
    """How much of the last turn's own reading is set aside: 0 up to `start`, rising to 1 at 1."""
    return max(0.0, followup - start) / (1.0 - start)


def shortness(words: int) -> float:
    return max(0.0, 1.0 - words / SHORT_TURN_WORDS)


def feature_tensor(inputs: TurnInputs, agent: int = LABELS.index("agent"),
                   reading: LastTurnReading = LastTurnReading()) -> np.ndarray:
    """(n_labels, n_features): φ_k for every candidate k."""
    n = len(inputs.p_last)
    phi = np.zeros((n, len(FEATURES)))
    short = shortness(inputs.last_words)
    log_last = np.log(np.clip(inputs.p_last, reading.min_p, 1.0))
    read = reading.read(inputs.followup)
    last = read * log_last  # the last turn's own reading, as much of it as counts
    phi[:, 0] = last
    phi[:, 3] = short * last
    if inputs.p_history is not None:
        log_hist = np.log(np.clip(inputs.p_history, 1e-6, 1.0))
        phi[:, 1] = log_hist
        phi[:, 2] = short * log_hist
    if inputs.session is not None:
        s = inputs.session
        phi[s, 4] = 1.0
        phi[s, 5] = short
        phi[s, 6] = 1.0 - float(inputs.p_last.max())
    phi[agent, 7] = float(inputs.has_tools)
    phi[agent, 8] = float(inputs.tool_activity)
    # how much the turn leans on the conversation, by cue words (9-11), by the learned follow-up model (12-14) and
    # by how sure that model is beyond SURE_FOLLOWUP (15-17): each weighs the session, the turn's own reading and
    # the history's
    for first, lean in ((9, inputs.refers_back), (12, inputs.followup), (15, sure_followup(inputs.followup))):
        if lean == 0.0:
            continue  # its columns stay 0
        if inputs.session is not None:
            phi[inputs.session, first] = lean
        phi[:, first + 1] = lean * last
        if inputs.p_history is not None:
            phi[:, first + 2] = lean * log_hist
    phi[:, 18] = read * np.maximum(log_last, LOG_LAST_TURN_FLOOR)
    if inputs.session is not None and inputs.p_history is None:
        # the new turn alone (a client that keeps the conversation on the server): the session is all that
        # speaks for the past, so how much it weighs then is learned apart from when the history is resent
        phi[inputs.session, 19] = 1.0
    if inputs.session is None and inputs.p_history is not None:
        # the history alone (a client that resends the conversation but keeps no session id): the earlier turns
        # are all that speaks for the past, so their weight then is learned apart from when a session says it
        phi[:, 20] = log_hist
    phi[np.arange(n), N_BIAS + np.arange(n)] = 1.0
    return phi


@dataclass
class TurnModel:
    """θ over FEATURES, one row per stage; `probabilities(inputs)` is the conversation's decision."""

    theta: np.ndarray  # (len(STAGES), len(FEATURES))
    reading: LastTurnReading = LastTurnReading()

    def probabilities(self, inputs: TurnInputs, *, escalated: bool = False) -> np.ndarray:
        scores = feature_tensor(inputs, reading=self.reading) @ self.theta[int(escalated)]
        scores -= scores.max()
        e = np.exp(scores)
        return e / e.sum()

    def weights(self) -> dict[str, dict[str, float]]:
        return {stage: {name: round(float(v), 4) for name, v in zip(FEATURES, row)}
                for stage, row in zip(STAGES, self.theta)}


def fit_stage(phis: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float = 0.01) -> np.ndarray:
    """Weighted conditional-logit fit (BFGS over a few weights, deterministic) of θ on φ tensors (n, labels, features)."""
    from scipy.optimize import minimize

    w = w / w.sum()
    rows = np.arange(len(y))

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        scores = phis @ theta
        scores -= scores.max(axis=1, keepdims=True)
        p = np.exp(scores)
        p /= p.sum(axis=1, keepdims=True)
        nll = -(w * np.log(p[rows, y] + 1e-12)).sum() + l2 * theta @ theta
        expected = np.einsum("nk,nkf->nf", p, phis)
        grad = (w[:, None] * (expected - phis[rows, y])).sum(axis=0) + 2 * l2 * theta
        return float(nll), grad

    start = np.zeros(phis.shape[2])
    start[0] = 1.0
    result = minimize(loss, start, jac=True, method="BFGS", options={"maxiter": 300, "gtol": 1e-5})
    return np.asarray(result.x, dtype=np.float64)


def stack(inputs: Sequence[TurnInputs]) -> np.ndarray:
    return np.stack([feature_tensor(i) for i in inputs]) if inputs else np.zeros((0, len(LABELS), len(FEATURES)))
