"""Source hold-out: how the classifier does on requests from sources it never saw.

For each source repository (the part of `source` before ':'), the models are fitted on the
other repositories and predict the held-out one. Some repositories span two classes, so the
held-out class mix varies; each repository counts once in the mean.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from macaron.router.classifier.data import LABELS
from macaron.router.classifier.features import Bags
from macaron.router.classifier.metrics import classification_metrics
from macaron.router.classifier.model import combine

if TYPE_CHECKING:
    from macaron.router.classifier.train import TrainConfig


@dataclass
class OutOfFold:
    """Every training row's prediction by models that never saw its repository."""

    fast_logits: np.ndarray
    embed_logits: np.ndarray | None
    y: np.ndarray
    groups: np.ndarray
    # The same fast models' logits of each row's deliverable sentences (deliverable.py); a row without them
    # has its whole text's logits here. None: not computed.
    deliverable_logits: np.ndarray | None = None


def out_of_fold(
    bags: Sequence[Bags],
    vectors: np.ndarray | None,
    y: np.ndarray,
    repos: np.ndarray,
    config: "TrainConfig",
    *,
    only: Sequence[str] | None = None,
    progress: Callable[[str], None] | None = None,
    static: Any = None,
    dense: np.ndarray | None = None,
    deliverables: Sequence[tuple[str, Bags] | None] | None = None,
) -> OutOfFold:
    """Out-of-fold logits, one fold per repository (or per repository in `only`). `static` and `dense`: the
    fast model's static features (static_embedding.StaticEmbedding and every row's features), if any.
    `deliverables`: each row's deliverable sentences and their bags (None: the row has none), read by the
    same fold's fast model into `deliverable_logits`."""
    from macaron.router.classifier.train import fast_logits, fit_embedding, fit_fast, source_weights

    names = sorted(set(repos)) if only is None else list(only)
    rows = np.where(np.isin(repos, names))[0]
    fast_out = np.zeros((len(y), len(LABELS)))
    embed_out = np.zeros((len(y), len(LABELS))) if vectors is not None else None
    made_out = np.zeros((len(y), len(LABELS))) if deliverables is not None else None
    for k, name in enumerate(names, start=1):
        if progress:
            progress(f"  hold-out {k}/{len(names)}: {name}")
        held = np.where(repos == name)[0]
        kept = np.where(repos != name)[0]
        weights = source_weights(repos[kept], y[kept], config.full_share_lines)
        fast = fit_fast([bags[i] for i in kept], y[kept], weights, config, static,
                        None if dense is None else dense[kept])
        fast_out[held] = fast_logits(fast, [bags[i] for i in held], None if dense is None else dense[held])
        if deliverables is not None and made_out is not None:
            made_out[held] = fast_out[held]
            made = [i for i in held if deliverables[i] is not None]
            if made:
                pairs = [deliverables[i] for i in made]
                made_out[made] = fast_logits(fast, [bag for _, bag in pairs], texts=[text for text, _ in pairs])
        if vectors is not None and embed_out is not None:
            head = fit_embedding(vectors[kept], y[kept], weights, config)
            embed_out[held] = vectors[held] @ head.weights + head.bias
    return OutOfFold(
        fast_logits=fast_out[rows],
        embed_logits=None if embed_out is None else embed_out[rows],
        y=y[rows],
        groups=repos[rows],
        deliverable_logits=None if made_out is None else made_out[rows],
    )


def summarize(
    y: np.ndarray,
    groups: np.ndarray,
    p_fast: np.ndarray,
    p_embed: np.ndarray | None,
    threshold: float,
    fast_weight: float,
    p_both: np.ndarray | None = None,
    second_below: float = 0.0,
) -> dict[str, Any]:
    """Per-repository and mean hold-out accuracy of the fast path, the embedding model and the
    escalating classifier, plus pooled macro-F1 and the escalation rate. `p_both`: both encoders averaged
    (model.SecondEncoder), pooled instead of `p_embed` where the escalated answer stays under `second_below`."""
    escalate = p_fast.max(axis=1) < threshold if p_embed is not None else np.zeros(len(y), bool)
    final = p_fast if p_embed is None else np.where(escalate[:, None], combine(p_fast, p_embed, fast_weight), p_fast)
    second = np.zeros(len(y), bool)
    if p_embed is not None and p_both is not None:
        second = escalate & (final.max(axis=1) < second_below)
        final = np.where(second[:, None], combine(p_fast, p_both, fast_weight), final)
    per_repo: dict[str, dict[str, Any]] = {}
    for name in sorted(set(groups)):
        m = groups == name
        entry: dict[str, Any] = {
            "n": int(m.sum()),
            "labels": sorted({LABELS[i] for i in y[m]}),
            "fast_accuracy": round(float((p_fast[m].argmax(1) == y[m]).mean()), 4),
            "accuracy": round(float((final[m].argmax(1) == y[m]).mean()), 4),
            "escalation_rate": round(float(escalate[m].mean()), 4),
        }
        if p_embed is not None:
            entry["embed_accuracy"] = round(float((p_embed[m].argmax(1) == y[m]).mean()), 4)
        per_repo[name] = entry
    summary: dict[str, Any] = {
        "per_repository": per_repo,
        "mean_fast_accuracy": round(float(np.mean([e["fast_accuracy"] for e in per_repo.values()])), 4),
        "mean_accuracy": round(float(np.mean([e["accuracy"] for e in per_repo.values()])), 4),
        "escalation_rate": round(float(escalate.mean()), 4),
        "threshold": threshold,
        "fast_weight_when_escalated": fast_weight,
        "pooled": classification_metrics(y, final.argmax(1)),
        "pooled_fast": classification_metrics(y, p_fast.argmax(1)),
    }
    if p_both is not None:
        summary.update(second_rate=round(float(second.mean()), 4), second_below=second_below)
    if p_embed is not None:
        summary["mean_embed_accuracy"] = round(float(np.mean([e["embed_accuracy"] for e in per_repo.values()])), 4)
    return summary


def grouped_folds(repos: np.ndarray, k: int) -> list[list[str]]:
    """`k` folds of whole repositories with about equal row counts (largest first onto the lightest
    fold; ties by name), so one encoder fine-tune per fold replaces one per repository."""
    names, counts = np.unique(repos, return_counts=True)
    order = sorted(range(len(names)), key=lambda i: (-counts[i], names[i]))
    folds: list[list[str]] = [[] for _ in range(min(k, len(names)))]
    sizes = [0] * len(folds)
    for i in order:
        j = min(range(len(folds)), key=lambda f: (sizes[f], f))
        folds[j].append(str(names[i]))
        sizes[j] += int(counts[i])
    return [sorted(f) for f in folds]


@dataclass
class EncoderOutOfFold:
    """Frozen-head and tuned-encoder logits for every row, both from the same repository folds."""

    frozen_logits: np.ndarray | None
    tuned_logits: np.ndarray
    folds: list[list[str]]


def encoder_out_of_fold(
    lower: Any,
    vectors: np.ndarray | None,
    y: np.ndarray,
    repos: np.ndarray,
    config: "TrainConfig",
    *,
    progress: Callable[[str], None] | None = None,
) -> EncoderOutOfFold:
    """For each fold of repositories: the tuned encoder (LoRA + head, encoder_tuning.py) and the frozen
    embedding head fitted on the other folds, predicting the fold's rows."""
    from macaron.router.classifier import encoder_tuning
    from macaron.router.classifier.train import fit_embedding, source_weights

    folds = grouped_folds(repos, config.encoder_folds)
    tuned = np.zeros((len(y), len(LABELS)))
    frozen = np.zeros((len(y), len(LABELS))) if vectors is not None else None
    for k, fold in enumerate(folds, start=1):
        if progress:
            progress(f"  encoder hold-out fold {k}/{len(folds)}: {', '.join(fold)}")
        held = np.where(np.isin(repos, fold))[0]
        kept = np.where(~np.isin(repos, fold))[0]
        weights = source_weights(repos[kept], y[kept], config.full_share_lines)
        adapter = encoder_tuning.fit(lower, kept, y[kept], weights, len(LABELS), config.tune, progress=progress)
        tuned[held] = encoder_tuning.embed_rows(lower, held, adapter) @ adapter.head_weights + adapter.head_bias
        if vectors is not None and frozen is not None:
            head = fit_embedding(vectors[kept], y[kept], weights, config)
            frozen[held] = vectors[held] @ head.weights + head.bias
    return EncoderOutOfFold(frozen_logits=frozen, tuned_logits=tuned, folds=folds)
