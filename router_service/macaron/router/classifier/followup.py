"""The follow-up model: how much a conversation's last user turn leans on what came before.

"why?", "you missed one", "now apply it to the rest" carry no domain of their own, yet the fast
model reads them confidently as some domain ("why?" as `chat` at 0.97), and that pulled stays out of
their conversation. A hand list of referring words (turns.REFERRING_WORDS) catches a few; this model
learns the register instead: a logistic regression over the fast model's own TF-IDF features (no
second vectorizer, one more sparse dot product at run time), trained on the last turns of the
multi-turn data, follow-ups (`stay`) against full requests (`continue`, `switch`). Its probability is
one input of the conversation decision (turns.py), which learns how far to trust it.

The conversation decision is trained on out-of-fold probabilities (one fit without each source
repository of the new turn), so it learns how the model does on registers it never saw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from macaron.router.classifier.features import analyze
from macaron.router.classifier.vectorizer import InferenceFeaturizer, TfidfVectorizer

# Kinds of multi-turn lines that teach the model: a `stay` turn is a follow-up, a `continue` or
# `switch` turn a full request; tool loops say nothing about the user's wording.
FOLLOWUP_KINDS = ("stay",)
REQUEST_KINDS = ("continue", "switch")


@dataclass
class FollowupModel:
    """p(follow-up | last turn) = sigmoid(x · weights + bias) over the fast model's features."""

    weights: np.ndarray  # (n_features,)
    bias: float

    def probability(self, featurizer: InferenceFeaturizer, text: str) -> float:
        return self.probability_of(*featurizer.transform(text))

    def probability_of(self, idx: np.ndarray, val: np.ndarray) -> float:
        """From a text's fast-path features (column indices, values), shared with the fast model."""
        score = self.bias + (float(val @ self.weights[idx]) if idx.size else 0.0)
        return float(1.0 / (1.0 + np.exp(-score)))

    def probabilities(self, vectorizer: TfidfVectorizer, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros(0)
        x = vectorizer.transform_many([analyze(t) for t in texts])
        return 1.0 / (1.0 + np.exp(-(np.asarray(x @ self.weights).ravel() + self.bias)))


def training_rows(kinds: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(rows that teach the model, their 0/1 labels)."""
    rows = np.array([i for i, k in enumerate(kinds) if k in FOLLOWUP_KINDS + REQUEST_KINDS], dtype=int)
    return rows, np.array([int(kinds[i] in FOLLOWUP_KINDS) for i in rows], dtype=int)


def fit(vectorizer: TfidfVectorizer, texts: Sequence[str], labels: np.ndarray, c: float = 1.0) -> FollowupModel:
    """Each distinct (text, label) counts once (the written follow-ups repeat over many lines), and the two
    classes weigh the same."""
    from sklearn.linear_model import LogisticRegression

    distinct = sorted({(t, int(y)) for t, y in zip(texts, labels)})
    if len({y for _, y in distinct}) < 2:
        return FollowupModel(weights=np.zeros(vectorizer.n_features), bias=0.0)
    y = np.array([label for _, label in distinct])
    w = np.where(y == 1, 0.5 / y.sum(), 0.5 / (1 - y).sum()) * len(y)
    clf = LogisticRegression(C=c, solver="liblinear", max_iter=500, random_state=0)
    clf.fit(vectorizer.transform_many([analyze(t) for t, _ in distinct]), y, sample_weight=w)
    return FollowupModel(weights=clf.coef_.ravel().astype(np.float64), bias=float(clf.intercept_[0]))


def out_of_fold(vectorizer: TfidfVectorizer, texts: Sequence[str], kinds: Sequence[str], groups: np.ndarray,
                c: float = 1.0) -> np.ndarray:
    """Every line's probability from a model fitted without its group (source repository of the new turn)."""
    rows, labels = training_rows(kinds)
    out = np.zeros(len(texts))
    for name in sorted(set(groups)):
        held = np.where(groups == name)[0]
        keep = groups[rows] != name
        model = fit(vectorizer, [texts[i] for i in rows[keep]], labels[keep], c)
        out[held] = model.probabilities(vectorizer, [texts[i] for i in held])
    return out
