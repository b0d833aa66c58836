"""The conversation decision: stay on follow-ups, switch on confident other-domain turns, never
inside a tool loop; measured on the multi-turn dev set and on hold-out by source (printed)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from macaron.router.classifier.data import load_jsonl
from macaron.router.classifier.errors import ClassificationInputError
from macaron.router.classifier.evaluate import evaluate
from macaron.router.classifier.train import TrainConfig, train

from .conftest import subset

# Floors a little under what the shipped artifact measures on its fast path on the rebuilt dev set
# (with the follow-up model: stay 0.956, continue 1.0, switch 0.825, tool loop 1.0; before it 0.929 / 1.0 /
# 0.835; see the README), so a regression fails and noise does not. With the sources revision's requests in
# the dev set: stay 0.948, switch 0.795 = 0.823 on the 372 switches into requests of the earlier sources and
# 0.43 on the 28 into requests of the new sources, which the shipped artifact predates (retraining on them
# is what lifts this floor back).
MULTITURN_FAST_FLOORS = {"stay": 0.92, "continue": 0.95, "switch": 0.80, "tool_loop": 1.0}
# Measured on these subsets, deciding with the switch gate as the classifier does: stay 0.86, continue
# 0.91, switch 0.77, tool loop 1.0 (the generic follow-ups written for the project are one held-out
# group: without them stays fall to 0.73).
HOLDOUT_FLOORS = {"stay": 0.80, "continue": 0.85, "switch": 0.72, "tool_loop": 1.0}
# The goals on the kinds it names, held on the same dev set and fast path: stays whose new turn alone is
# ambiguous (no other specialist at 0.8), switches whose new turn alone is confidently their specialist. Measured
# with the shipped artifact (U): 0.992 (390 lines) and 0.976 (411 lines).
GOAL_KIND_FLOORS = {"stay_ambiguous": 0.95, "switch_confident": 0.90}

CODE_HISTORY = [
    {"role": "user", "content": "Write a Python function that parses an ISO 8601 date string and returns a datetime."},
    {"role": "assistant", "content": "```python\nfrom datetime import datetime\ndef parse(s):\n    return datetime.fromisoformat(s)\n```"},
]
UI_HISTORY = [
    {"role": "user", "content": "Design a signup form page with email, password and a submit button in HTML and CSS."},
    {"role": "assistant", "content": "<form class=\"signup\">...</form>"},
]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def multiturn_dev(routing_data_dir):
    return load_jsonl(routing_data_dir / "multiturn_dev.jsonl")


def test_multiturn_dev_kinds(fast_classifier, multiturn_dev, capsys) -> None:
    result = evaluate(fast_classifier, multiturn_dev, warmup=0)["multiturn"]
    with capsys.disabled():
        print(f"\n[classifier] multi-turn dev (fast path): {result}")
    for kind, floor in {**MULTITURN_FAST_FLOORS, **GOAL_KIND_FLOORS}.items():
        assert result[kind] >= floor, (kind, result)
    assert result["tool_loop_switches"] == 0


def test_confident_switch_wins_over_stickiness(fast_classifier) -> None:
    messages = CODE_HISTORY + [{"role": "user", "content": "Set an alarm for 6:30 tomorrow morning and remind me to call the dentist."}]
    d = fast_classifier.classify(messages=messages, session="code")
    assert d.specialist == "agent" and d.session_aware


def test_declared_tools_do_not_hold_a_switch_back(fast_classifier) -> None:
    messages = [
        {"role": "user", "content": "What's the weather like in Paris right now?"},
        {"role": "assistant", "content": "It is 18 degrees and sunny in Paris."},
        {"role": "user", "content": "Write a Python function that merges two sorted lists into one sorted list."},
    ]
    assert fast_classifier.classify(messages=messages, tools=TOOLS, session="agent").specialist == "code"


@pytest.mark.parametrize("follow_up", ["make it a bit nicer", "ok, and the other one?", "try again"])
def test_short_follow_up_stays(fast_classifier, follow_up: str) -> None:
    messages = UI_HISTORY + [{"role": "user", "content": follow_up}]
    assert fast_classifier.classify(messages=messages, session="ui").specialist == "ui"


@pytest.mark.parametrize("session", ["chat", "agent", "code", "ui"])
def test_unsure_lone_turn_keeps_the_session(fast_classifier, session: str) -> None:
    # A session whose history the caller did not resend: only the session's specialist and a vague turn.
    # Without `min_switch_confidence` the ui session left for agent at 0.34 and 0.45.
    for text in ("Turn 1: tell me more", "Turn 1, go on", "can you help?"):
        d = fast_classifier.classify(messages=[{"role": "user", "content": text}], session=session)
        assert d.specialist == session, (text, d.probabilities)


@pytest.mark.parametrize(("labelled", "bare"), [("Turn 2: tell me more", "tell me more"), ("Q3. why?", "why?"),
                                                ("Step 4 - now the tests", "now the tests")])
def test_a_label_before_a_turn_is_read_past(fast_classifier, labelled: str, bare: str) -> None:
    for session in ("code", "ui", None):
        a = fast_classifier.classify(messages=[{"role": "user", "content": labelled}], session=session, escalate=False)
        b = fast_classifier.classify(messages=[{"role": "user", "content": bare}], session=session, escalate=False)
        assert (a.specialist, a.probabilities) == (b.specialist, b.probabilities)


@pytest.mark.parametrize("text", ["turn on the lights in the kitchen", "Turn 90 degrees left", "Turn 1:",
                                  "1. Write a Python function that sorts a list"])
def test_only_a_numbered_label_followed_by_the_turn_is_dropped(text: str) -> None:
    from macaron.router.classifier.conversation import without_turn_label

    assert without_turn_label(text) == text


# A lone vague turn in a `ui` session: W moved it to `code` at 0.52, just past the 0.5 gate ("table" is a code word
# of the SQL questions in training; classifier README, "Previous revision (W)"); the shipped artifact (Y) reads
# `code` at 0.45 and keeps the session, by a margin of 0.05, so this is the first test to fail if "table" drifts back.
VAGUE_TURN_IN_A_UI_SESSION = ("ui", "make a table of this")


def test_a_vague_table_request_stays_in_a_ui_session(fast_classifier) -> None:
    session, text = VAGUE_TURN_IN_A_UI_SESSION
    turn = [{"role": "user", "content": text}]
    assert fast_classifier.classify(messages=turn, session=session, escalate=False).specialist == session


def test_unsure_gate_off_lets_the_decision_switch(fast_classifier) -> None:
    from macaron.router.classifier import SpecialistClassifier

    ungated = SpecialistClassifier(fast_classifier.artifact, fast_classifier.settings.model_copy(
        update={"min_switch_confidence": 0.0}))
    # vague lone turns the decision alone moved out of their session, unsure, in one retrain or another ("Turn 1: tell
    # me more" before a label before a turn was read past, "can you help?" in `ui` before every specialist weighed the
    # same inside a kind, "make a table of this" in `ui` and "put it on a page" in `chat` after): with the gate every
    # one stays, and without it at least one moves
    turns = ("can you help?", "make a table of this", "put it on a page", "show me", "fix it please")
    moved = []
    for session in ("chat", "agent", "code", "ui"):
        for text in turns:
            turn = [{"role": "user", "content": text}]
            assert fast_classifier.classify(messages=turn, session=session, escalate=False).specialist == session
            d = ungated.classify(messages=turn, session=session, escalate=False)
            if d.specialist != session:
                assert d.confidence < 0.5, (session, text, d.probabilities)
                moved.append((session, text))
    assert moved


def test_tool_loop_never_switches(fast_classifier) -> None:
    messages = CODE_HISTORY + [
        {"role": "user", "content": "Run the tests."},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "type": "function",
                                                               "function": {"name": "shell", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "1", "content": "Set an alarm for 7am and book a table for two at 8pm."},
    ]
    d = fast_classifier.classify(messages=messages, tools=TOOLS, session="code")
    assert (d.specialist, d.confidence, d.escalated) == ("code", 1.0, False)


def test_unknown_session_specialist_is_a_clear_error(fast_classifier) -> None:
    with pytest.raises(ClassificationInputError, match="session specialist"):
        fast_classifier.classify("write a haiku", session="poet")


def test_multiturn_holdout_by_source(train_examples, routing_data_dir, capsys) -> None:
    """The conversation model fitted without each source repository of the new turn (printed per
    repository), on subsets, fast path only. The turn probabilities here come from models that saw
    the rows (no single-turn hold-out, to stay quick), so this guards the pipeline; the figures of
    record are the full run's (`macaron router train`, the artifact's report)."""
    multiturn = subset(load_jsonl(routing_data_dir / "multiturn_train.jsonl"), every=8)
    artifact = train(config=TrainConfig(escalation=False, holdout=False), train_examples=subset(train_examples, every=12),
                     multiturn_examples=multiturn)
    report = artifact.report["multiturn_holdout"]
    with capsys.disabled():
        print(f"\n[classifier] multi-turn hold-out (fast path, subset): {report['pooled']}")
        for name, entry in report["per_repository"].items():
            print(f"  {name:40s} {entry}")
    for kind, floor in HOLDOUT_FLOORS.items():
        assert report["pooled"][kind] >= floor, (kind, report["pooled"])
    assert report["pooled"]["tool_loop_switches"] == 0
    assert np.isfinite(artifact.turn.theta).all()


def test_lone_turn_copies_keep_every_line_and_drop_only_the_history() -> None:
    from macaron.router.classifier.multiturn_data import with_lone_turns

    history = [{"role": "user", "content": "Fix this SQL query"}, {"role": "assistant", "content": ""}]
    lines = [{"messages": history + [{"role": "user", "content": f"turn {i}"}], "label": "code", "session": "code",
              "kind": "stay", "source": "s", "license": "l"} for i in range(40)]
    lines.append({**lines[0], "session": None})  # no session: the history is all the router would know
    lines.append({**lines[0], "kind": "tool_loop"})  # a tool result needs its call
    out = with_lone_turns(lines, seed=0, share=0.5)
    assert [x for x in out if "history" not in x] == lines  # the given lines, in their order
    lone = [x for x in out if x.get("history") == "not resent"]
    assert 5 < len(lone) < 35 and all(x["session"] == "code" and x["kind"] == "stay" for x in lone)
    assert all(x["messages"] == x["messages"][-1:] and x["messages"][0]["content"].startswith("turn") for x in lone)
    assert with_lone_turns(lines, seed=0, share=0.5) == out  # deterministic for one seed


def test_short_switches_are_switches_to_a_short_full_request_of_another_domain(train_examples) -> None:
    from macaron.router.classifier.multiturn_data import MIN_REQUEST_WORDS, short_switches

    lines = short_switches(train_examples, seed=3, n=120, max_words=6)
    assert len(lines) == 120 and {x["kind"] for x in lines} == {"switch"}
    for x in lines:
        words = len(x["messages"][-1]["content"].split())
        assert MIN_REQUEST_WORDS <= words <= 6 and x["messages"][-1]["role"] == "user"
        assert x["session"] is None or x["session"] != x["label"]
    assert {x["label"] for x in lines} == {"chat", "agent", "code", "ui"}
    assert any(x["session"] is None for x in lines) and any(x["session"] for x in lines)
    assert short_switches(train_examples, seed=3, n=120, max_words=6) == lines  # deterministic for one seed


def test_the_shipped_training_conversations_carry_short_switches(routing_data_dir) -> None:
    """multiturn_train.jsonl ends with `short_switches` of train.jsonl (seed 200), as `multiturn_data.write`
    appends them."""
    from macaron.router.classifier.multiturn_data import SHORT_SWITCHES, short_switches

    lines = [json.loads(raw) for raw in (routing_data_dir / "multiturn_train.jsonl").open(encoding="utf-8")]
    expected = short_switches(load_jsonl(routing_data_dir / "train.jsonl"), seed=200, n=SHORT_SWITCHES)
    assert lines[-SHORT_SWITCHES:] == expected


def test_refreshing_the_short_switches_keeps_every_other_line(routing_data_dir, tmp_path) -> None:
    """After a change to train.jsonl, `--short-switches-only` redraws the appended tail and nothing else."""
    from macaron.router.classifier.multiturn_data import SHORT_SWITCHES, refresh_short_switches, short_switches

    shipped = (routing_data_dir / "multiturn_train.jsonl").read_text(encoding="utf-8").splitlines()
    train_lines = (routing_data_dir / "train.jsonl").read_text(encoding="utf-8").splitlines()[::3]
    (tmp_path / "train.jsonl").write_text("".join(line + "\n" for line in train_lines), encoding="utf-8")
    (tmp_path / "multiturn_train.jsonl").write_text("\n".join(shipped) + "\n", encoding="utf-8")
    assert refresh_short_switches(tmp_path) == {"train": len(shipped), "short_switches": SHORT_SWITCHES}
    refreshed = (tmp_path / "multiturn_train.jsonl").read_text(encoding="utf-8").splitlines()
    assert refreshed[:-SHORT_SWITCHES] == shipped[:-SHORT_SWITCHES]
    expected = short_switches(load_jsonl(tmp_path / "train.jsonl"), seed=200, n=SHORT_SWITCHES)
    assert [json.loads(line) for line in refreshed[-SHORT_SWITCHES:]] == expected
    assert refreshed[-SHORT_SWITCHES:] != shipped[-SHORT_SWITCHES:]  # drawn from the other train.jsonl


def test_kind_metrics_report_the_lone_turns_apart() -> None:
    from macaron.router.classifier.turn_training import kind_metrics

    y, pred = np.array([0, 0, 1, 1]), np.array([0, 1, 1, 0])
    out = kind_metrics(y, pred, ["stay", "stay", "switch", "switch"], [0, 0, 0, 0], [False, True, False, False])
    assert (out["stay"], out["stay_lone"], out["stay_lone_n"], out["switch"]) == (0.5, 0.0, 1, 0.5)
    assert "switch_lone" not in out


def test_kind_metrics_report_the_confident_switches_apart() -> None:
    from macaron.router.classifier.turn_training import kind_metrics

    y, pred = np.array([0, 1, 1, 1]), np.array([0, 1, 0, 0])
    kinds = ["stay", "switch", "switch", "switch"]
    out = kind_metrics(y, pred, kinds, [0, 0, 0, 0], confident=[True, True, False, True])
    assert (out["switch"], out["switch_confident"], out["switch_confident_n"]) == (0.3333, 0.5, 2)
    assert "switch_confident" not in kind_metrics(y, pred, kinds, [0, 0, 0, 0])  # no mask, no figure


def test_kind_metrics_report_the_ambiguous_stays_apart() -> None:
    from macaron.router.classifier.turn_training import kind_metrics, other_is_confident

    # a stay whose new turn reads confidently as another domain is not the goal's "last turn ambiguous"
    assert other_is_confident(np.array([0.05, 0.9, 0.03, 0.02]), 0)
    assert not other_is_confident(np.array([0.1, 0.7, 0.1, 0.1]), 0)
    assert not other_is_confident(np.array([0.9, 0.05, 0.03, 0.02]), 0)  # confident, but for the label
    y, pred = np.array([0, 0, 0, 1]), np.array([0, 1, 1, 1])
    kinds = ["stay", "stay", "stay", "switch"]
    out = kind_metrics(y, pred, kinds, [0, 0, 0, 0], ambiguous=[True, True, False, True])
    assert (out["stay"], out["stay_ambiguous"], out["stay_ambiguous_n"]) == (0.3333, 0.5, 2)
    assert "stay_ambiguous" not in kind_metrics(y, pred, kinds, [0, 0, 0, 0])  # no mask, no figure


def test_confident_last_turns_read_the_label_on_the_new_turn_alone() -> None:
    from macaron.router.classifier.turn_training import (
        CONFIDENT_LAST_TURN, TurnData, ambiguous_last_turns, confident_last_turns,
    )
    from macaron.router.classifier.turns import TurnInputs

    def line(p: list[float]) -> TurnInputs:
        return TurnInputs(p_last=np.array(p), p_history=None, session=0, last_words=6)

    lines = [line([0.05, 0.9, 0.05, 0.0]), line([0.3, 0.6, 0.1, 0.0]), line([0.9, 0.05, 0.05, 0.0])]
    data = TurnData(fast=lines, escalated=lines, y=np.array([1, 1, 1]), kinds=["switch"] * 3,
                    groups=np.array(["a", "a", "a"]), rule_session=[None] * 3)
    assert CONFIDENT_LAST_TURN == 0.8
    assert confident_last_turns(data).tolist() == [True, False, False]  # the label's probability, not the top one
    data.y = np.array([0, 0, 0])  # read as stays of specialist 0: only the first reads confidently as another
    assert ambiguous_last_turns(data).tolist() == [False, True, True]


def test_inside_a_kind_every_specialist_weighs_the_same() -> None:
    from macaron.router.classifier.turn_training import kind_label_weights

    # stays: 6 chat lines (one source of real follow-ups), 2 code; switches: 1 agent, 3 ui
    kinds = ["stay"] * 8 + ["switch"] * 4
    y = np.array([0] * 6 + [2] * 2 + [1] + [3] * 3)
    w = kind_label_weights(kinds, y)
    by = lambda k, label: sum(wi for wi, ki, yi in zip(w, kinds, y) if ki == k and yi == label)  # noqa: E731
    assert by("stay", 0) == pytest.approx(by("stay", 2)) == pytest.approx(0.5)
    assert by("switch", 1) == pytest.approx(by("switch", 3)) == pytest.approx(0.5)
    assert w.sum() == pytest.approx(2.0)  # each kind weighs 1, as before


def test_lazy_hold_out_reads_the_embedding_only_where_a_router_would() -> None:
    """The follow-up model's embedding reading is asked for only on readable turns whose first decision
    (TF-IDF follow-up probability) is unsure, as decision.py does; a sure first decision stands."""
    from macaron.router.classifier.turn_training import LazyFollowup, TurnData, predict
    from macaron.router.classifier.turns import TurnInputs

    class FollowupReader:  # stays in session 0 when the turn reads as a follow-up, else leans to 1
        def probabilities(self, inputs: TurnInputs, *, escalated: bool = False) -> np.ndarray:
            if inputs.followup > 0.5:
                return np.array([0.95, 0.05, 0.0, 0.0])
            return np.array([0.02, 0.98, 0.0, 0.0]) if inputs.last_words > 10 else np.array([0.15, 0.85, 0.0, 0.0])

    def data(followup: float) -> TurnData:
        lines = [TurnInputs(p_last=np.full(4, 0.25), p_history=None, session=0, last_words=w, followup=followup)
                 for w in (3, 3, 30)]
        return TurnData(fast=lines, escalated=lines, y=np.array([0, 0, 1]), kinds=["stay", "stay", "switch"],
                        groups=np.array(["a"] * 3), rule_session=[None] * 3)

    embedded, first = data(0.9), data(0.1)
    lazy = LazyFollowup(first=first, readable=np.array([True, False, True]), below=0.9)
    pred, escalated, read = predict(FollowupReader(), embedded, [0, 1, 2], lazy=lazy)
    assert pred.tolist() == [0, 1, 1]  # unsure and readable: embedding read; unreadable: first decision stands
    assert read.tolist() == [True, False, False]  # the third's first decision (0.98) was sure
    assert not escalated.any()
    assert predict(FollowupReader(), embedded, [0, 1, 2])[2].all()  # without lazy every line reads it


def test_the_gate_keeps_a_session_only_while_the_decision_leaves_it_a_chance() -> None:
    """turns.gated_choice: an unsure top choice does not move the session, unless the session's own specialist is
    under `min_session_probability`; a confident one always does, and without a session the top one wins."""
    from macaron.router.classifier.turns import gated_choice

    chat, agent, code, ui = range(4)
    unsure = np.array([0.29, 0.49, 0.02, 0.20])  # agent on top but under 0.5, ui (the session) 0.20
    assert gated_choice(unsure, ui, 0.5) == ui
    assert gated_choice(unsure, ui, 0.5, min_session_probability=0.1) == ui
    assert gated_choice(unsure, ui, 0.5, min_session_probability=0.25) == agent
    assert gated_choice(np.array([0.1, 0.6, 0.1, 0.2]), ui, 0.5) == agent
    assert gated_choice(unsure, None, 0.5, min_session_probability=0.25) == agent
    assert gated_choice(unsure, agent, 0.5) == agent


def test_the_session_floor_is_a_setting_the_classifier_applies(fast_classifier) -> None:
    """decision.py applies `min_session_probability` through the same gate as the hold-out (turns.gated_choice)."""
    from macaron.router.classifier import SpecialistClassifier

    messages = [{"role": "user", "content": "Build a landing page for my bakery"},
                {"role": "assistant", "content": "<section>"}, {"role": "user", "content": "What is my user name?"}]
    p = fast_classifier.classify(messages=messages, session="ui", escalate=False).probabilities
    top = max(p, key=p.get)
    assert top != "ui", p  # an account question, not the page

    def decide(floor: float) -> str:
        gated = SpecialistClassifier(fast_classifier.artifact, fast_classifier.settings.model_copy(
            update={"min_switch_confidence": 1.0, "min_session_probability": floor}))
        return gated.classify(messages=messages, session="ui", escalate=False).specialist

    assert decide(0.0) == "ui"  # every switch gated, and the session kept
    assert decide(p["ui"] + 0.01) == top  # the session all but ruled out: the top specialist takes it
