"""Refitting the conversation decision alone, on the inputs a full train kept.

Why: `macaron router train` takes about 90 minutes on two cores, and nearly all of it is single-turn work (the
fast model's source hold-out, the encoder fine-tune and its folds, the base model's folds) that new multi-turn data
or a change to the conversation decision does not touch. `macaron router train --save-turn-inputs FILE` keeps
what the conversation step read: the single-turn hold-out logits, the final fast model and embedding head, their
calibration, the escalation curve and every sentence embedding the step computed. `macaron router refit-turns
--inputs FILE` reruns that step alone (`train._train_turns`, the same code) on the current multi-turn data and
writes the artifact with the new conversation decision and follow-up models (about 10 minutes instead of 90). The
result is what the full train would write, so the refit refuses where it could not be: an artifact whose
single-turn models are not the saved ones, a train.jsonl changed since, or multi-turn data that moves the escalation
threshold (the second encoder was fitted at the old one); each error says to run the full train.
"""

from __future__ import annotations

import copy
import dataclasses
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from macaron.router.classifier.data import Example
from macaron.router.classifier.errors import ClassifierError
from macaron.router.classifier.model import (
    Artifact, EmbeddingHead, FastModel, adapter_path_for, base_adapter_path_for, read_joblib,
)

FORMAT = 1


class RefitError(ClassifierError):
    """The saved inputs cannot reproduce what a full train would write for this artifact or data."""


class RecordingEmbed:
    """Wraps the step's sentence encoder and keeps every text's embedding it returned, so a refit reads the same
    vectors without loading the encoder for texts it already saw."""

    def __init__(self, embed: Callable[[Sequence[str]], np.ndarray]) -> None:
        self.embed = embed
        self.seen: dict[str, np.ndarray] = {}

    def __call__(self, batch: Sequence[str]) -> np.ndarray:
        vectors = np.asarray(self.embed(batch))
        for text, vector in zip(batch, vectors):
            self.seen[text] = vector  # as the encoder gave it, so a refit reads the very same numbers
        return vectors


@dataclass
class TurnStepInputs:
    """Everything `train._train_turns` reads besides the multi-turn examples (see the module docstring)."""

    texts: list[str]
    oof: Any  # holdout.OutOfFold, or None without hold-out
    fast: FastModel
    head: EmbeddingHead | None
    config: Any  # train.TrainConfig
    repos: np.ndarray
    fast_t: float
    embed_t: float
    threshold: float  # the single-turn escalation threshold the step starts from
    alpha: float
    curve: list[dict[str, Any]] | None  # the single-turn escalation curve, before the step scored it
    embeddings: dict[str, np.ndarray] = field(default_factory=dict)
    train_sha256: str = ""  # train.jsonl the single-turn models were fitted on ("" for examples given in code)

    def save(self, path: str | Path) -> Path:
        import joblib

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        joblib.dump({"format": FORMAT, **self.__dict__}, tmp, compress=3)
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "TurnStepInputs":
        path = Path(path)
        payload = read_joblib(path, RefitError, str(path), f"write it with `macaron router train --save-turn-inputs {path}`",
                              "write it again with `macaron router train --save-turn-inputs`")
        if not isinstance(payload, dict) or payload.get("format") != FORMAT:
            raise RefitError(f"{path} is not a conversation step's inputs of this version; write it again with "
                             "`macaron router train --save-turn-inputs`")
        payload.pop("format")
        return cls(**payload)


# How far a model's weights may lie from the saved ones and still be "the same model": a full train is not bit for bit
# reproducible (two trains of the shipped artifact's fast model differ by up to 3e-5 in a weight and 1.5e-4 in a bias),
# while another model differs everywhere by far more.
SAME_MODEL_ATOL = 1e-3


def _same(a: Any, b: Any) -> bool:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.all(np.abs(a - b) <= SAME_MODEL_ATOL))


def _check_same_models(inputs: TurnStepInputs, artifact: Artifact) -> None:
    fast = artifact.fast
    if not (_same(inputs.fast.weights, fast.weights) and _same(inputs.fast.bias, fast.bias)
            and _same(inputs.fast.temperature, fast.temperature)):
        raise RefitError("the artifact's fast model is not the one these inputs were saved with; refit the artifact "
                         "they came from, or run the full `macaron router train`")
    head = artifact.embedding
    if (inputs.head is None) != (head is None) or (
            head is not None and not (_same(inputs.head.weights, head.weights) and _same(inputs.head.bias, head.bias))):
        raise RefitError("the artifact's embedding head is not the one these inputs were saved with (or escalation "
                         "is off in one of them); run the full `macaron router train`")


def _frozen_embed_for(artifact: Artifact) -> Callable[[Sequence[str]], np.ndarray] | None:
    """The frozen MiniLM (through the embedding cache, as the full train reads it) where the artifact's escalation
    encoder is tuned; None where the escalation encoder is the frozen one already."""
    if artifact.embedding is None or (artifact.adapter is None and artifact.adapter_path is None):
        return None
    from macaron.router.classifier.embeddings_cache import cached_embed

    return cached_embed


def _embed_for(inputs: TurnStepInputs, artifact: Artifact) -> Callable[[Sequence[str]], np.ndarray] | None:
    """Saved embeddings first; a text the full train never embedded goes through the encoder the train used (the
    artifact's tuned MiniLM, else the frozen one), loaded only if such a text comes."""
    if inputs.head is None:
        return None
    encoder: list[Callable[[Sequence[str]], np.ndarray]] = []

    def embed(batch: Sequence[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(batch) if t not in inputs.embeddings]
        if missing:
            if not encoder:
                adapter = artifact.adapter if artifact.adapter is not None else artifact.adapter_path
                if adapter is not None:
                    from macaron.router.classifier.escalation import Embedder

                    embedder = Embedder(adapter=adapter)
                    encoder.append(lambda texts: embedder.encode(list(texts), batch_size=32))
                else:
                    from macaron.router.classifier.embeddings_cache import cached_embed

                    encoder.append(cached_embed)
            for text, vector in zip(missing, np.asarray(encoder[0](missing))):
                inputs.embeddings[text] = vector
        return np.stack([inputs.embeddings[t] for t in batch])

    return embed


def refit(inputs: TurnStepInputs, artifact: Artifact, multiturn: Sequence[Example], *, train_sha256: str | None = None,
          followup_encoder: str | None = None, progress: Callable[[str], None] | None = None) -> Artifact:
    """`artifact` with its conversation decision and follow-up models fitted anew on `multiturn` (the same step as
    `macaron router train`), and its report's multi-turn sections replaced. `train_sha256`: the current train.jsonl's
    (checked against the one the inputs were saved from). `followup_encoder`: the encoder the follow-up model reads
    (one of followup.ENCODERS; None: the saved config's). Nothing before the conversation step reads it, so the
    result is still the full train's with that choice."""
    from macaron.router.classifier import train

    say = progress or (lambda message: None)
    if not multiturn:
        raise RefitError("no multi-turn examples to fit the conversation decision on (multiturn_train.jsonl)")
    if train_sha256 and inputs.train_sha256 and train_sha256 != inputs.train_sha256:
        raise RefitError("train.jsonl changed since these inputs were saved, so the single-turn models would change "
                         "too; run the full `macaron router train`")
    _check_same_models(inputs, artifact)
    config = inputs.config
    if followup_encoder is not None:
        config = dataclasses.replace(config, followup_embedding_encoder=followup_encoder)
        if isinstance(artifact.report.get("config"), dict):
            artifact.report["config"] = {**artifact.report["config"], "followup_embedding_encoder": followup_encoder}
    started = time.time()
    curve = copy.deepcopy(inputs.curve)
    say(f"conversation decision on {len(multiturn)} multi-turn conversations (refit on saved inputs)")
    turn, (followup, followup_embedded), report, chosen = train._train_turns(
        list(multiturn), inputs.texts, inputs.oof, inputs.fast, inputs.head, _embed_for(inputs, artifact),
        config, fast_t=inputs.fast_t, embed_t=inputs.embed_t, threshold=inputs.threshold, alpha=inputs.alpha,
        say=say, curve=curve, repos=inputs.repos, frozen_embed=_frozen_embed_for(artifact))
    if artifact.embedding is not None and chosen != artifact.escalation_threshold:
        raise RefitError(f"with this multi-turn data the escalation threshold would move ({artifact.escalation_threshold}"
                         f" -> {chosen}), and the rest of the artifact was fitted at the old one; run the full "
                         "`macaron router train`")
    artifact.turn, artifact.followup, artifact.followup_embedded = turn, followup, followup_embedded
    out = artifact.report
    out["multiturn_holdout"] = report
    out["turn_weights"] = turn.weights()
    out["followup_cue_weights"] = followup.cue_weights_by_name()
    out.pop("followup_embedded_cue_weights", None)
    if followup_embedded is not None:
        out["followup_embedded_cue_weights"] = followup_embedded.cue_weights_by_name()
    scored = {point["threshold"]: point for point in curve or []}
    for point in out.get("holdout", {}).get("escalation_curve", []):
        if point.get("threshold") in scored:
            for key in [k for k in point if k.startswith("multiturn")]:
                del point[key]
            point.update({k: v for k, v in scored[point["threshold"]].items() if k.startswith("multiturn")})
    out["turn_refit"] = {"seconds": round(time.time() - started, 1), "n_multiturn": len(multiturn)}
    return artifact


def save_beside(artifact: Artifact, source: Path, path: str | Path) -> Path:
    """Saves a refitted artifact loaded from `source` at `path`, its encoder adapters copied along (a loaded
    artifact keeps them as files beside it, which `Artifact.save` does not rewrite)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.resolve() != Path(source).resolve():
        for sidecar in (adapter_path_for, base_adapter_path_for):
            if sidecar(source).is_file():
                shutil.copyfile(sidecar(source), sidecar(path))
    return artifact.save(path)
