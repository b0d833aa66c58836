"""The specialist classifier's public API on the shipped artifact: decisions, bad input,
multi-turn input, latency, the dev accuracy floor, and `macaron router eval`."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest

from macaron.router.classifier import ClassificationInputError, ClassifierSettings, RouteDecision
from macaron.router.classifier.evaluate import evaluate

# Measured on dev.jsonl with the shipped artifact (fast path only): 0.95; the floor leaves room
# for a retrain on the same data, not for a regression.
DEV_FAST_ACCURACY_FLOOR = 0.93
DEV_FAST_MACRO_F1_FLOOR = 0.92


def test_decision_shape(fast_classifier) -> None:
    decision = fast_classifier.classify("write a python function that reverses a linked list")
    assert isinstance(decision, RouteDecision)
    assert decision.specialist == "code"
    assert set(decision.probabilities) == {"chat", "agent", "code", "ui"}
    assert math.isclose(sum(decision.probabilities.values()), 1.0, rel_tol=1e-9)
    assert decision.confidence == max(decision.probabilities.values())
    assert decision.escalated is False
    assert decision.latency_ms > 0


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("set an alarm for 6:30 tomorrow morning", "agent"),
        ("Build a landing page for a coffee shop with a hero section, menu cards and a contact form", "ui"),
        ("What are some good ways to stay motivated while studying for exams?", "chat"),
        ("Fix the TypeError in this code:\n```python\nprint('total: ' + 3)\n```", "code"),
    ],
)
def test_obvious_requests(fast_classifier, text: str, label: str) -> None:
    assert fast_classifier.classify(text).specialist == label


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "   \n\t "])
def test_empty_text_is_a_clear_error(fast_classifier, text: str) -> None:
    with pytest.raises(ClassificationInputError, match="empty"):
        fast_classifier.classify(text)


def test_error_is_a_value_error(fast_classifier) -> None:
    with pytest.raises(ValueError):
        fast_classifier.classify("")


def test_non_utf8_bytes_are_a_clear_error(fast_classifier) -> None:
    with pytest.raises(ClassificationInputError, match="UTF-8"):
        fast_classifier.classify(b"plan my trip \xff\xfe to Rome")


def test_utf8_bytes_are_accepted(fast_classifier) -> None:
    assert fast_classifier.classify("book a table at the café for two tonight".encode()).specialist == "agent"


@pytest.mark.xfail(strict=True, reason="known weakness: little of the training data is French; in a French booking the "
                   "fast path reads 'table', which the SQL questions of StaQC made a code word, as code at 0.50 "
                   "(classifier README)")
def test_a_french_booking_is_not_code(fast_classifier) -> None:
    assert fast_classifier.classify("réserve une table pour deux ce soir").specialist in {"agent", "chat"}


def test_lone_surrogate_is_a_clear_error(fast_classifier) -> None:
    with pytest.raises(ClassificationInputError, match="Unicode"):
        fast_classifier.classify("hello \udcff world")


def test_neither_or_both_inputs_are_errors(fast_classifier) -> None:
    with pytest.raises(ClassificationInputError, match="exactly one"):
        fast_classifier.classify()
    with pytest.raises(ClassificationInputError, match="exactly one"):
        fast_classifier.classify("hi", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(ClassificationInputError, match="string"):
        fast_classifier.classify(42)  # type: ignore[arg-type]


def test_huge_text_is_bounded(fast_classifier) -> None:
    """10 MB of text is cut to `max_chars` (first 3/4, last 1/4) before featurizing."""
    huge = "Please build a responsive dashboard page with charts and a sidebar. " + "lorem ipsum " * 900_000
    start = time.perf_counter()
    decision = fast_classifier.classify(huge)
    assert (time.perf_counter() - start) < 0.5
    assert decision.specialist in {"chat", "agent", "code", "ui"}


def test_messages_without_user_turn_are_an_error(fast_classifier) -> None:
    with pytest.raises(ClassificationInputError, match="no user turn"):
        fast_classifier.classify(messages=[{"role": "system", "content": "You are helpful."}])
    with pytest.raises(ClassificationInputError, match="messages\\[0\\]"):
        fast_classifier.classify(messages=["hello"])  # type: ignore[list-item]


# --- multi-turn --------------------------------------------------------------------------------


def test_last_user_turn_weighs_most(fast_classifier) -> None:
    messages = [
        {"role": "user", "content": "Write a Python script that renames all .txt files in a folder."},
        {"role": "assistant", "content": "```python\nimport os\nfor f in os.listdir('.'):\n    ...\n```"},
        {"role": "user", "content": "Thanks! Now set a reminder to call my mom at 7pm tonight."},
    ]
    assert fast_classifier.classify(messages=messages).specialist == "agent"


def test_short_follow_up_keeps_the_conversation_domain(fast_classifier) -> None:
    messages = [
        {"role": "user", "content": "Design a signup form page with email, password and a submit button in HTML and CSS."},
        {"role": "assistant", "content": "<form class=\"signup\">...</form>"},
        {"role": "user", "content": "make it a bit nicer"},
    ]
    assert fast_classifier.classify(messages=messages).specialist == "ui"


def test_content_parts_and_system_prompt(fast_classifier) -> None:
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": [{"type": "text", "text": "Write a Python function that returns the nth Fibonacci number."}]},
    ]
    assert fast_classifier.classify(messages=messages).specialist == "code"


def test_declared_tools_are_learned_evidence_not_a_verdict(fast_classifier) -> None:
    """Tools make agent likelier for an ambiguous request, but a clear code request stays code."""
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    text = "Can you look that up for me?"
    # Compared on one path: declared tools send even a lone turn through the conversation decision,
    # whose calibration differs from the single-turn one by about 0.02 near certainty (measured).
    greeting = [{"role": "user", "content": "hi there"}, {"role": "assistant", "content": "Hello! How can I help?"}]
    plain = fast_classifier.classify(messages=greeting + [{"role": "user", "content": text}])
    with_tools = fast_classifier.classify(messages=greeting + [{"role": "user", "content": text}], tools=tools)
    assert with_tools.probabilities["agent"] > plain.probabilities["agent"]
    assert with_tools.specialist == "agent"
    weather = [{"role": "user", "content": "What's the weather like in Paris right now?"}]
    assert fast_classifier.classify(messages=weather, tools=tools).specialist == "agent"
    code = "Write a Python function that merges two sorted lists into one sorted list."
    assert fast_classifier.classify(messages=[{"role": "user", "content": code}], tools=tools).specialist == "code"


# --- accuracy and latency on dev ----------------------------------------------------------------


def test_dev_accuracy_floor_and_fast_latency(fast_classifier, dev_examples, capsys) -> None:
    result = evaluate(fast_classifier, dev_examples)
    with capsys.disabled():
        print(
            f"\n[classifier] dev (fast path): accuracy={result['accuracy']} macro_f1={result['macro_f1']} "
            f"ece={result['calibration_ece']} p50={result['latency_p50_ms']['fast']} ms "
            f"p99={result['latency_p99_ms']['fast']} ms"
        )
    assert result["accuracy"] >= DEV_FAST_ACCURACY_FLOOR
    assert result["macro_f1"] >= DEV_FAST_MACRO_F1_FLOOR
    assert result["escalation_rate"] == 0.0
    # "well under a millisecond" for most requests, with room for a busy CI machine
    assert result["latency_p50_ms"]["fast"] < 1.0
    assert np.array(result["confusion_matrix"]["rows_true_columns_predicted"]).sum() == len(dev_examples)


# --- CLI ------------------------------------------------------------------------------------


def test_cli_eval_prints_one_json_object(tmp_path, capsys) -> None:
    from macaron.cli import main

    data = tmp_path / "mini.jsonl"
    lines = [
        {"text": "turn off the living room lights", "label": "agent", "source": "x"},
        {"text": "write a SQL query that counts orders per customer", "label": "code"},
        {"text": "create a pricing page with three plan cards", "label": "ui"},
        {"text": "why is the sky blue?", "label": "chat"},
        {"messages": [{"role": "user", "content": "book a table for two at 8pm"}], "label": "agent"},
        {"text": "   ", "label": "chat"},
    ]
    data.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    assert main(["router", "eval", "--data", str(data), "--no-escalation"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    result = json.loads(out[-1])
    for key in ("accuracy", "macro_f1", "per_class", "confusion_matrix", "escalation_rate",
                "latency_p50_ms", "latency_p99_ms"):
        assert key in result
    assert set(result["latency_p99_ms"]) == {"fast", "all"}
    assert result["per_class"]["code"]["support"] == 1
    assert result["n"] == 5 and result["invalid_inputs"] == 1


def test_cli_eval_reports_bad_file(tmp_path, capsys) -> None:
    from macaron.cli import main

    data = tmp_path / "bad.jsonl"
    data.write_bytes(b'{"text": "hi \xff", "label": "chat"}\n')
    assert main(["router", "eval", "--data", str(data), "--no-escalation"]) == 2
    assert "UTF-8" in capsys.readouterr().err


def test_settings_are_part_of_the_config() -> None:
    from macaron.config import MacaronSettings

    settings = MacaronSettings()
    assert isinstance(settings.classifier, ClassifierSettings)
    for name, field in ClassifierSettings.model_fields.items():
        assert field.description, name


def test_long_history_costs_no_more_than_a_short_one(fast_classifier) -> None:
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} about cooking pasta"}
               for i in range(20_000)]
    history.append({"role": "user", "content": "Write a Python function that parses a CSV file into a list of dicts."})
    start = time.perf_counter()
    decision = fast_classifier.classify(messages=history)
    assert (time.perf_counter() - start) < 0.1
    assert decision.specialist == "code"
