"""Would SmolLM2-135M-Instruct, LoRA-tuned for routing, escalate better than the routing-tuned MiniLM?

    OMP_NUM_THREADS=2 nice -n 5 python loadtest/bench_encoder_tune_smollm.py [--top-layers 3]
    ... --limit 400 --epochs 1          # a smoke run

The shipped escalation encoder is MiniLM with LoRA on its top 2 of 6 layers (`encoder_tuning.py`).
A linear probe on the project's own base model, frozen, already read unseen sources better than the
frozen MiniLM (`bench_encoder_probe.py`); this asks the question that decides whether the router
should escalate to the base model instead: both encoders *tuned* the same way, judged the same way.

- Protocol of `macaron router train`'s encoder comparison: `holdout.grouped_folds` (4 folds of whole
  source repositories), `train.source_weights`, each fold's encoder fitted on the other three.
- MiniLM: `holdout.encoder_out_of_fold` as training runs it (`TuneConfig()` defaults).
- SmolLM2: the router's second escalation encoder as `macaron router train` tunes it
  (`base_encoder.py`: the request as a user turn of the chat template, 64 tokens of it at most; the
  blocks below the top `--top-layers` frozen and run once per text; LoRA rank 8 on every projection of
  the top blocks; a head on the final-normed, L2-normalised state of the last token), with this
  script's `--depth`, `--top-layers`, `--epochs` and `--lr`. That training reads what the router's
  run-time encoder reads is tests/router/test_base_encoder.py's job.
- Averaged: both encoders at once (mean of their calibrated log-probabilities), alone, pooled with the
  fast path, and as a cascade (the second model only where fast path + MiniLM stay unsure).
- Combined: each encoder's fold logits pooled with the fast path's per-repository hold-out exactly as
  `train.compare_encoders` does (own temperature, pooling weight and threshold under the 30 % cap).
- Timing: one escalation (batch 1, `--depth` blocks) through each run-time encoder on this thread.

Fold logits are cached as .npy under --cache-dir, so a rerun only pools. Progress goes to stderr;
the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench_encoder_probe import (  # noqa: E402  (the probe's data, cache and pooling helpers)
    cached,
    combined,
    digest,
    fast_holdout_probs,
    load_split,
    say,
    scores,
    smollm_dir,
    time_calls,
    versus,
)

def averaged(first: np.ndarray, second: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Both encoders at once: the mean of their temperature-scaled log-probabilities, recalibrated."""
    from macaron.router.classifier.model import averaged_log_probabilities, softmax
    from macaron.router.classifier.train import fit_temperature

    mean = averaged_log_probabilities(softmax(first / fit_temperature(first, y)), softmax(second / fit_temperature(second, y)))
    return mean / fit_temperature(mean, y)


def cascade(p_fast: np.ndarray, first: np.ndarray, both: np.ndarray, y: np.ndarray, repos: np.ndarray,
            threshold: float, fast_weight: float, second_below: Sequence[float]) -> dict[str, Any]:
    """Escalate to MiniLM as the router does; where fast path + MiniLM is still under `t`, pool the fast path
    with both encoders instead. Mean accuracy over repositories and the share that needed the second model."""
    from macaron.router.classifier.holdout import combine
    from macaron.router.classifier.model import softmax
    from macaron.router.classifier.train import fit_temperature

    p_first = softmax(first / fit_temperature(first, y))
    p_both = softmax(both)
    escalate = p_fast.max(1) < threshold
    one = np.where(escalate[:, None], combine(p_fast, p_first, fast_weight), p_fast)

    def mean_repo(p: np.ndarray) -> float:
        pred = p.argmax(1)
        return round(float(np.mean([(pred[repos == r] == y[repos == r]).mean() for r in sorted(set(repos))])), 4)

    out: dict[str, Any] = {"first_only": mean_repo(one)}
    for t in second_below:
        second = escalate & (one.max(1) < t)
        two = np.where(second[:, None], combine(p_fast, p_both, fast_weight), one)
        out[f"{t:g}"] = {"second_share": round(float(second.mean()), 4), "mean_repo_accuracy": mean_repo(two),
                         "pooled_accuracy": round(float((two.argmax(1) == y).mean()), 4)}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--model-dir", default=None, help="converted SmolLM2 directory (default: the project's)")
    parser.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "macaron" / "bench_encoder_tune"))
    parser.add_argument("--top-layers", type=int, default=3, help="layers tuned with LoRA (the last of --depth)")
    parser.add_argument("--depth", type=int, default=30,
                        help="run only the first N of the 30 blocks (then the final norm): a cheaper encoder")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--limit", type=int, default=None, help="a random subset of train (smoke runs)")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from macaron.router.classifier import holdout
    from macaron.router.classifier.data import LABELS
    from macaron.router.classifier.train import TrainConfig, source_weights

    config = TrainConfig()
    texts, y, repos = load_split(args.data_dir, "train", args.limit)
    folds = holdout.grouped_folds(repos, config.encoder_folds)
    cache = Path(args.cache_dir)
    key = digest(texts, y.tolist(), repos.tolist())
    say(f"{len(texts)} texts, {len(set(repos))} repositories, folds of {[len(f) for f in folds]} repositories")

    p_fast = fast_holdout_probs(texts, y, repos, cache / f"fast-{key}.npy")

    def minilm() -> np.ndarray:
        from macaron.router.classifier.encoder_tuning import LowerStates

        lower = LowerStates(texts, config.tune, progress=say)
        return holdout.encoder_out_of_fold(lower, None, y, repos, config, progress=say).tuned_logits

    minilm_logits = cached(cache / f"minilm-tuned-{key}.npy", minilm)

    from macaron.router.classifier import base_encoder

    model_dir = smollm_dir(args.model_dir)
    tune = base_encoder.BaseTuneConfig(depth=args.depth, top_layers=args.top_layers, max_tokens=args.max_tokens,
                                       epochs=args.epochs, lr=args.lr)

    def smol() -> np.ndarray:
        lower = base_encoder.LowerStates(texts, tune, model_dir, progress=say)
        return base_encoder.out_of_fold(lower, y, repos, folds,
                                        lambda r, labels: source_weights(r, labels, config.full_share_lines),
                                        len(LABELS), progress=say)

    smol_logits = cached(cache / f"smol-d{args.depth}-top{args.top_layers}-e{args.epochs}-lr{args.lr:g}-{key}.npy", smol)

    alone = {"minilm_tuned": scores(minilm_logits, y, repos), "smollm2_tuned": scores(smol_logits, y, repos)}
    alone["smollm2_tuned"]["vs_minilm"] = versus(alone["smollm2_tuned"]["per_repository"],
                                                alone["minilm_tuned"]["per_repository"])
    both = combined(p_fast, minilm_logits, smol_logits, y, repos, folds, 0.75)
    mean_logits = averaged(minilm_logits, smol_logits, y)
    alone["averaged"] = scores(mean_logits, y, repos)
    alone["averaged"]["vs_minilm"] = versus(alone["averaged"]["per_repository"], alone["minilm_tuned"]["per_repository"])
    with_both = combined(p_fast, minilm_logits, mean_logits, y, repos, folds, 0.75)["candidate"]
    steps = cascade(p_fast, minilm_logits, mean_logits, y, repos, 0.75, with_both["fast_weight"],
                    (0.5, 0.6, 0.7, 0.8, 0.9, 1.01))

    from macaron.router.classifier.escalation import Embedder

    embedder = Embedder(threads=torch.get_num_threads())
    base = base_encoder.BaseModelEmbedder(None, model_dir=model_dir, config=tune)  # untrained LoRA: same cost
    embedder.encode(["warm up"])
    base.encode(["warm up"])
    timing = {"minilm_one_escalation": time_calls(lambda b: embedder.encode(b), texts, 1, 30),
              "smollm2_one_escalation": time_calls(lambda b: base.encode(b), texts, 1, 30)}

    say(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "per_repository"} for k, v in alone.items()},
                   indent=1))
    result = {
        "n": len(texts), "depth": args.depth, "top_layers": args.top_layers, "epochs": args.epochs, "lr": args.lr,
        "alone": {k: {kk: vv for kk, vv in v.items()} for k, v in alone.items()},
        "combined": both, "combined_averaged": with_both, "cascade_at_0.75": steps, "timing": timing, "threads": torch.get_num_threads(),
        "minilm_alone_mean": alone["minilm_tuned"]["mean_repo_accuracy"],
        "smollm2_alone_mean": alone["smollm2_tuned"]["mean_repo_accuracy"],
        "minilm_combined_mean": both["minilm"]["mean_repo_accuracy"],
        "smollm2_combined_mean": both["candidate"]["mean_repo_accuracy"],
        "averaged_alone_mean": alone["averaged"]["mean_repo_accuracy"],
        "averaged_combined_mean": with_both["mean_repo_accuracy"],
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
