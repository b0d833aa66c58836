"""`macaron router eval`: accuracy, macro-F1, per-class precision/recall, confusion matrix,
escalation rate and latency of a trained classifier on a JSONL file; on multi-turn lines
(`session`, `kind`) also the accuracy per kind, the switches inside tool loops, and the goal's two kinds
apart: switches whose new turn alone the fast path reads confidently as their specialist
(`switch_confident`) and stays whose new turn alone it reads confidently as no other (`stay_ambiguous`).

Latency is measured per request on the calling thread: `fast` times the fast path alone
(escalation off) the first time it sees the request, with the word cache cold but for a
short warm-up; `all` times the real decision (escalating when unsure). The embedding model
is loaded before timing starts, so its one-off load (about 7 s) is not in the percentiles.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from macaron.router.classifier.data import Example
from macaron.router.classifier.decision import SpecialistClassifier
from macaron.router.classifier.errors import ClassificationInputError
from macaron.router.classifier.metrics import classification_metrics, percentile_ms
from macaron.router.classifier.train import expected_calibration_error


def _classify(classifier: SpecialistClassifier, example: Example, escalate: bool | None):
    session = example.extra.get("session")
    if example.text is not None:
        return classifier.classify(example.text, tools=example.tools, session=session, escalate=escalate)
    return classifier.classify(messages=example.messages, tools=example.tools, session=session, escalate=escalate)


def _last_turn_alone(classifier: SpecialistClassifier, example: Example) -> np.ndarray | None:
    """The fast path's probabilities (in `classifier.labels` order) for the example's last user turn sent alone;
    None for a single text."""
    if example.messages is None:
        return None
    last = classifier.conversation(messages=example.messages).last_text
    probabilities = classifier.classify(last, escalate=False).probabilities
    return np.array([probabilities[label] for label in classifier.labels])


def evaluate(classifier: SpecialistClassifier, examples: Sequence[Example], *, warmup: int = 20) -> dict[str, Any]:
    """Metrics of `classifier` on labelled `examples` (one JSON-able dict)."""
    labels = classifier.labels
    classifier.wait_for_encoders()
    valid: list[Example] = []
    invalid = 0
    for example in examples:
        try:
            _classify(classifier, example, escalate=False)
        except ClassificationInputError:
            invalid += 1  # a server answers INVALID_ARGUMENT; counted, not scored
        else:
            valid.append(example)
    examples = valid
    # Time from a cold word cache (warmed only by `warmup` requests), as a fresh process would.
    classifier.artifact.fast.featurizer.clear_cache()
    for example in examples[:warmup]:
        _classify(classifier, example, escalate=False)
    fast_ms: list[float] = []
    all_ms: list[float] = []
    y_true: list[int] = []
    y_pred: list[int] = []
    fast_pred: list[int] = []
    probs: list[list[float]] = []
    escalated = second = 0
    for example in examples:
        start = time.perf_counter()
        fast = _classify(classifier, example, escalate=False)
        fast_ms.append((time.perf_counter() - start) * 1000.0)
        start = time.perf_counter()
        decision = _classify(classifier, example, escalate=None)
        all_ms.append((time.perf_counter() - start) * 1000.0)
        y_true.append(labels.index(example.label))
        y_pred.append(labels.index(decision.specialist))
        fast_pred.append(labels.index(fast.specialist))
        probs.append([decision.probabilities[label] for label in labels])
        escalated += decision.escalated
        second += decision.second_opinion
    yt, yp = np.array(y_true), np.array(y_pred)
    result = classification_metrics(yt, yp, labels)
    kinds = [str(e.extra.get("kind", "")) for e in examples]
    if any(kinds):  # multi-turn lines: accuracy per kind (stay / continue / switch / tool_loop)
        from macaron.router.classifier.turn_training import (
            CONFIDENT_LAST_TURN, is_lone, kind_metrics, other_is_confident,
        )

        sessions = [labels.index(s) if (s := e.extra.get("session")) in labels else None for e in examples]
        lone = [is_lone(e) for e in examples]
        alone = [_last_turn_alone(classifier, e) if kind in ("switch", "stay") else None
                 for kind, e in zip(kinds, examples)]
        sure = [kind == "switch" and p is not None and p[y] >= CONFIDENT_LAST_TURN
                for kind, p, y in zip(kinds, alone, y_true)]
        ambiguous = [kind == "stay" and p is not None and not other_is_confident(p, y)
                     for kind, p, y in zip(kinds, alone, y_true)]
        result["multiturn"] = kind_metrics(yt, yp, kinds, sessions, lone, sure, ambiguous)
        result["multiturn_fast"] = kind_metrics(yt, np.array(fast_pred), kinds, sessions, lone, sure, ambiguous)
    result.update(
        invalid_inputs=invalid,
        fast_path_accuracy=round(float((np.array(fast_pred) == yt).mean()), 4) if len(yt) else 0.0,
        escalation_rate=round(escalated / len(examples), 4) if examples else 0.0,
        second_encoder_rate=round(second / len(examples), 4) if examples else 0.0,
        escalation_threshold=classifier.threshold if classifier.escalation_enabled else None,
        calibration_ece=round(expected_calibration_error(np.array(probs), yt), 4) if len(yt) else 0.0,
        latency_p50_ms={"fast": percentile_ms(fast_ms, 50), "all": percentile_ms(all_ms, 50)},
        latency_p99_ms={"fast": percentile_ms(fast_ms, 99), "all": percentile_ms(all_ms, 99)},
    )
    return result
