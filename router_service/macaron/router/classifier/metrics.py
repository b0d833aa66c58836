"""Accuracy, macro-F1, per-class precision/recall, confusion matrix, latency percentiles."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from macaron.router.classifier.data import LABELS


def classification_metrics(y_true: np.ndarray, y_pred: np.ndarray, labels: Sequence[str] = LABELS) -> dict[str, Any]:
    """Metrics over label indices; the confusion matrix has true labels as rows."""
    n = len(labels)
    matrix = np.zeros((n, n), dtype=int)
    for t, p in zip(y_true, y_pred):
        matrix[int(t), int(p)] += 1
    per_class: dict[str, dict[str, float]] = {}
    f1s = []
    for i, label in enumerate(labels):
        tp = matrix[i, i]
        predicted = matrix[:, i].sum()
        actual = matrix[i, :].sum()
        precision = tp / predicted if predicted else 0.0
        recall = tp / actual if actual else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_class[label] = {
            "precision": round(float(precision), 4),
            "recall": round(float(recall), 4),
            "f1": round(float(f1), 4),
            "support": int(actual),
        }
        if actual:
            f1s.append(f1)
    total = int(matrix.sum())
    return {
        "n": total,
        "accuracy": round(float(np.trace(matrix) / total), 4) if total else 0.0,
        "macro_f1": round(float(np.mean(f1s)), 4) if f1s else 0.0,
        "per_class": per_class,
        "confusion_matrix": {"labels": list(labels), "rows_true_columns_predicted": matrix.tolist()},
    }


def percentile_ms(samples: Sequence[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(samples), q)), 4) if len(samples) else 0.0
