"""Fitting and measuring the conversation decision (turns.py) on multi-turn data.

Inputs of the conversation model are the calibrated probabilities of the last turn and of the
earlier turns. For turns that are training rows they come from the source hold-out models (a
model that never saw the row's repository), so the conversation model learns how far to trust
turn probabilities on unseen traffic; other texts (follow-ups, tool results) get the final models'.
Every conversation is seen twice: with fast-path probabilities and with the escalated ones
(pooled where the fast path is unsure), because the classifier asks the conversation model at
both stages; each stage has its own weights (the embedding model errs differently, e.g. it is
confident about generic follow-ups). Kinds weigh the same, and inside a kind every specialist weighs the
same (`kind_label_weights`). Hold-out: the conversation model is fitted without each
source repository of the new turn in turn, and the kinds' accuracies are reported per repository.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from macaron.router.classifier.data import LABELS, Example
from macaron.router.classifier.model import combine, softmax
from macaron.router.classifier.settings import ClassifierSettings
from macaron.router.classifier.turns import (
    TurnInputs, TurnModel, fit_stage, gated_choice, may_escalate, refers_back, stack,
)

KIND_NAMES = ("stay", "continue", "switch", "tool_loop")
# The classifier's default switch gate (ClassifierSettings.min_switch_confidence), so hold-out figures
# measure the decision a router makes.
MIN_SWITCH_CONFIDENCE = ClassifierSettings.model_fields["min_switch_confidence"].default
MIN_SESSION_PROBABILITY = ClassifierSettings.model_fields["min_session_probability"].default
# The classifier's default for reading the new turn's embedding in the follow-up model
# (ClassifierSettings.followup_embedding_below): the lazy hold-out (`LazyFollowup`) decides as a router does.
FOLLOWUP_EMBEDDING_BELOW = ClassifierSettings.model_fields["followup_embedding_below"].default
# A switch is "confident" when the new turn alone (the fast path, no conversation) gives its specialist at least
# this probability: the kind the goal names ("last turn confidently another domain"), where stickiness
# must lose. `switch_confident` reports those lines apart; `switch` counts every switch, unsure turns included.
# The stays the goal names ("last turn ambiguous") are the mirror: no other specialist reaches this probability on
# the new turn alone (`stay_ambiguous`); a real follow-up that reads confidently as another domain ("Could you check
# the latest rates for me?" after a chat answer) is a stay of the data but not of that kind.
CONFIDENT_LAST_TURN = 0.8


@dataclass
class TurnData:
    """The conversation model's inputs for every multi-turn line (fast and escalated versions)."""

    fast: list[TurnInputs]
    escalated: list[TurnInputs]
    y: np.ndarray
    kinds: list[str]
    groups: np.ndarray
    rule_session: list[int | None]  # session index where an open tool loop decides by rule, else None
    threshold: float = 0.0  # escalation threshold: below it the escalated stage decides
    lone: list[bool] = field(default_factory=list)  # the new turn sent alone, the history not resent


def build_turn_data(
    examples: Sequence[Example],
    conversation_of: Callable[[Example], Any],
    logits_of: Callable[[list[str]], tuple[np.ndarray, np.ndarray | None]],
    *,
    fast_t: float,
    embed_t: float,
    threshold: float,
    alpha: float,
    followups: Sequence[float] | None = None,
) -> TurnData:
    """`logits_of(texts)` gives uncalibrated (fast, embedding-or-None) logits of texts; `followups`
    the follow-up model's probability of every line's last turn (followup.py; None: 0)."""
    conversations = [conversation_of(e) for e in examples]
    texts = sorted({seg.text for c in conversations for seg in (c.segments[:1] + c.history)})
    index = {t: i for i, t in enumerate(texts)}
    fast_logits, embed_logits = logits_of(texts)
    fast_inputs: list[TurnInputs] = []
    esc_inputs: list[TurnInputs] = []
    rule: list[int | None] = []
    for n, (example, conv) in enumerate(zip(examples, conversations)):
        session = example.extra.get("session")
        s = LABELS.index(session) if session in LABELS else None
        rule.append(s if (s is not None and conv.tool_loop_open) else None)
        last = index[conv.last_text]
        hist_rows = [index[seg.text] for seg in conv.history]
        hist_w = np.array([seg.weight for seg in conv.history])

        def probs(logits: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray | None]:
            p_last = softmax(logits[last] / t)
            p_hist = softmax(hist_w @ logits[hist_rows] / t) if hist_rows else None
            return p_last, p_hist

        f_last, f_hist = probs(fast_logits, fast_t)
        common = dict(session=s, last_words=conv.last_words, has_tools=conv.has_tools,
                      tool_activity=conv.has_tool_activity, refers_back=refers_back(conv.last_text),
                      followup=0.0 if followups is None else float(followups[n]))
        fast_inputs.append(TurnInputs(p_last=f_last, p_history=f_hist, **common))
        if embed_logits is not None:
            e_last, e_hist = probs(embed_logits, embed_t)
            m_last = combine(f_last, e_last, alpha) if f_last.max() < threshold else f_last
            m_hist = None
            if f_hist is not None and e_hist is not None:
                m_hist = combine(f_hist, e_hist, alpha) if f_hist.max() < threshold else f_hist
            esc_inputs.append(TurnInputs(p_last=m_last, p_history=m_hist, **common))
        else:
            esc_inputs.append(fast_inputs[-1])
    return TurnData(
        fast=fast_inputs,
        escalated=esc_inputs,
        y=np.array([LABELS.index(e.label) for e in examples]),
        kinds=[str(e.extra.get("kind", "")) for e in examples],
        groups=np.array([e.repository for e in examples]),
        rule_session=rule,
        threshold=threshold if embed_logits is not None else 0.0,
        lone=[is_lone(e) for e in examples],
    )


@dataclass
class LazyFollowup:
    """How a router reads the follow-up model: first without the new turn's embedding (`first`: the same lines
    with the TF-IDF follow-up probability), and with it (the TurnData the model was fitted on) only on lines
    whose turn the embedding-reading model reads (`readable`) and whose first decision is less sure than
    `below`. The hold-out fitted on every line's embedding would otherwise report a decision no router makes."""

    first: TurnData
    readable: np.ndarray
    below: float = FOLLOWUP_EMBEDDING_BELOW


def kind_label_weights(kinds: Sequence[str], y: np.ndarray) -> np.ndarray:
    """Kinds weigh the same, and inside a kind every specialist present weighs the same. Real follow-ups come from
    sources of one domain each (SGD's and BFCL's are `agent`, MT-Bench-101's `chat`), so by line counts the
    `stay` lines lean to whichever domains have such sources, and the biases learned from them pull every
    unsure follow-up there ("tell me more" alone in a `code` session went to `chat` at 0.51)."""
    counts: dict[tuple[str, int], int] = defaultdict(int)
    labels_of: dict[str, set[int]] = defaultdict(set)
    for k, label in zip(kinds, y):
        counts[(k, int(label))] += 1
        labels_of[k].add(int(label))
    return np.array([1.0 / (counts[(k, int(label))] * len(labels_of[k])) for k, label in zip(kinds, y)])


def _fit(data: TurnData, rows: np.ndarray) -> TurnModel:
    rows = np.array([r for r in rows if data.rule_session[r] is None])
    kinds = [data.kinds[r] for r in rows]
    y = data.y[rows]
    w = kind_label_weights(kinds, y)
    return TurnModel(theta=np.stack([
        fit_stage(stack([data.fast[r] for r in rows]), y, w),
        fit_stage(stack([data.escalated[r] for r in rows]), y, w),
    ]))


def fit(data: TurnData) -> TurnModel:
    return _fit(data, np.arange(len(data.y)))


def predict(model: TurnModel, data: TurnData, rows: Sequence[int],
            min_switch_confidence: float = MIN_SWITCH_CONFIDENCE,
            lazy: LazyFollowup | None = None,
            min_session_probability: float = MIN_SESSION_PROBABILITY) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Predicted label indices, whether each escalated and whether each read the new turn's embedding in the
    follow-up model, as the classifier decides: the fast stage (with `lazy`, first on `lazy.first`, and on `data`
    only where unsure and readable), then the escalated stage when unsure (an open tool loop with a session
    stays), and a session left only for a specialist at least `min_switch_confidence` likely, unless the session's own
    is under `min_session_probability` (decision.py's gate, turns.gated_choice)."""
    out, escalated, embedded = [], [], []
    for r in rows:
        rule = data.rule_session[r]
        if rule is not None:
            out.append(rule)
            escalated.append(False)
            embedded.append(False)
            continue
        source = data if lazy is None else lazy.first
        p = model.probabilities(source.fast[r])
        refine = lazy is not None and bool(lazy.readable[r]) and bool(p.max() < lazy.below)
        if refine:
            source = data
            p = model.probabilities(source.fast[r])
        unsure = bool(p.max() < source.threshold) and may_escalate(source.fast[r])
        if unsure:
            p = model.probabilities(source.escalated[r], escalated=True)
        out.append(gated_choice(p, source.fast[r].session, min_switch_confidence, min_session_probability))
        escalated.append(unsure)
        embedded.append(lazy is None or refine)
    return np.array(out, dtype=int), np.array(escalated, dtype=bool), np.array(embedded, dtype=bool)


def is_lone(example: Example) -> bool:
    """A multi-turn line whose new turn came alone, its history not resent (multiturn_data.with_lone_turns)."""
    return example.extra.get("history") == "not resent"


def kind_metrics(y: np.ndarray, pred: np.ndarray, kinds: Sequence[str], sessions: Sequence[int | None],
                 lone: Sequence[bool] = (), confident: Sequence[bool] = (),
                 ambiguous: Sequence[bool] = ()) -> dict[str, Any]:
    """Accuracy per kind (and, as `<kind>_lone`, on its lines whose history was not resent), on the
    switches whose new turn alone is confident (`switch_confident`, with `confident` the per-line mask,
    see CONFIDENT_LAST_TURN), on the stays whose new turn alone names no other specialist confidently
    (`stay_ambiguous`, with `ambiguous` the mask), and how many tool-loop turns switched away from the session."""
    kinds_arr = np.array(kinds)
    lone_arr = np.array(lone, dtype=bool) if len(lone) else np.zeros(len(kinds), dtype=bool)
    out: dict[str, Any] = {}
    for kind in KIND_NAMES:
        m = kinds_arr == kind
        if m.any():
            out[kind] = round(float((pred[m] == y[m]).mean()), 4)
            out[f"{kind}_n"] = int(m.sum())
        alone = m & lone_arr
        if alone.any():
            out[f"{kind}_lone"] = round(float((pred[alone] == y[alone]).mean()), 4)
            out[f"{kind}_lone_n"] = int(alone.sum())
    if len(confident):
        sure = (kinds_arr == "switch") & np.array(confident, dtype=bool)
        if sure.any():
            out["switch_confident"] = round(float((pred[sure] == y[sure]).mean()), 4)
            out["switch_confident_n"] = int(sure.sum())
    if len(ambiguous):
        unsure = (kinds_arr == "stay") & np.array(ambiguous, dtype=bool)
        if unsure.any():
            out["stay_ambiguous"] = round(float((pred[unsure] == y[unsure]).mean()), 4)
            out["stay_ambiguous_n"] = int(unsure.sum())
    loop = [i for i, k in enumerate(kinds) if k == "tool_loop" and sessions[i] is not None]
    out["tool_loop_switches"] = int(sum(pred[i] != sessions[i] for i in loop))
    return out


def holdout(data: TurnData, progress: Callable[[str], None] | None = None,
            min_switch_confidence: float = MIN_SWITCH_CONFIDENCE, lazy: LazyFollowup | None = None,
            min_session_probability: float = MIN_SESSION_PROBABILITY) -> dict[str, Any]:
    """Kinds' accuracy with the conversation model fitted without each repository of the new turn,
    deciding as the classifier does (with its switch gate; with `lazy`, reading the embedding in the
    follow-up model only where a router would)."""
    pred = np.zeros(len(data.y), dtype=int)
    escalated = np.zeros(len(data.y), dtype=bool)
    embedded = np.zeros(len(data.y), dtype=bool)
    names = sorted(set(data.groups))
    for name in names:
        held = np.where(data.groups == name)[0]
        model = _fit(data, np.where(data.groups != name)[0])
        pred[held], escalated[held], embedded[held] = predict(model, data, held, min_switch_confidence, lazy,
                                                              min_session_probability)
    sessions = [i.session for i in data.fast]
    confident = confident_last_turns(data)
    ambiguous = ambiguous_last_turns(data)
    per_repo = {}
    for name in names:
        m = np.where(data.groups == name)[0]
        per_repo[name] = kind_metrics(data.y[m], pred[m], [data.kinds[i] for i in m], [sessions[i] for i in m],
                                      [data.lone[i] for i in m] if data.lone else (), confident[m], ambiguous[m])
    pooled = kind_metrics(data.y, pred, data.kinds, sessions, data.lone, confident, ambiguous)
    pooled["escalation_rate"] = round(float(escalated.mean()), 4)
    if lazy is not None:
        pooled["followup_embedding_rate"] = round(float(embedded.mean()), 4)
    return {"pooled": pooled, "per_repository": per_repo, "errors": error_analysis(data, pred)}


def confident_last_turns(data: TurnData) -> np.ndarray:
    """Lines whose new turn alone (the fast path's hold-out probabilities) gives the line's label at least
    CONFIDENT_LAST_TURN."""
    return np.array([i.p_last[y] >= CONFIDENT_LAST_TURN for i, y in zip(data.fast, data.y)], dtype=bool)


def ambiguous_last_turns(data: TurnData) -> np.ndarray:
    """Lines whose new turn alone (the fast path's hold-out probabilities) gives no specialist but the line's label
    CONFIDENT_LAST_TURN or more."""
    return np.array([not other_is_confident(i.p_last, y) for i, y in zip(data.fast, data.y)], dtype=bool)


def other_is_confident(p_last: np.ndarray, label: int) -> bool:
    """Whether a specialist other than `label` gets CONFIDENT_LAST_TURN or more of `p_last`."""
    others = np.delete(np.asarray(p_last), label)
    return bool(others.size and others.max() >= CONFIDENT_LAST_TURN)


def error_analysis(data: TurnData, pred: np.ndarray) -> dict[str, Any]:
    """Why hold-out decisions fail, per kind: the share of lines whose last turn alone (fast path)
    names the right specialist (what a decision that read only the last turn would get), and the
    errors counted as `label->decided` with whether the decision kept the session's specialist or the
    last turn alone was already wrong."""
    out: dict[str, Any] = {}
    kinds = np.array(data.kinds)
    last = np.array([int(i.p_last.argmax()) for i in data.fast])
    sessions = np.array([-1 if i.session is None else i.session for i in data.fast])
    for kind in KIND_NAMES:
        m = kinds == kind
        if not m.any():
            continue
        wrong = np.where(m & (pred != data.y))[0]
        counts: dict[str, int] = defaultdict(int)
        for i in wrong:
            cause = "kept_session" if pred[i] == sessions[i] else ("last_turn_wrong" if last[i] != data.y[i] else "other")
            counts[f"{LABELS[data.y[i]]}->{LABELS[pred[i]]} ({cause})"] += 1
        out[kind] = {
            "last_turn_alone_right": round(float((last[m] == data.y[m]).mean()), 4),
            "errors": dict(sorted(counts.items(), key=lambda kv: -kv[1])),
        }
    return out
