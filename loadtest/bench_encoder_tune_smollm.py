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
- SmolLM2: the request as a user turn of the model's chat template (64 tokens of it at most); the
  layers below the top `--top-layers` are frozen and run once per text; LoRA (rank 8, alpha 16) on
  the attention and MLP projections of the top layers; the head reads the final-normed hidden state
  of the generation prompt's last token, L2-normalised, times 20 (as MiniLM's head); AdamW, one-cycle
  1e-3, batches of 32 length-sorted texts, seed 0, as `encoder_tuning.fit`.
- Averaged: both encoders at once (mean of their calibrated log-probabilities), alone, pooled with the
  fast path, and as a cascade (the second model only where fast path + MiniLM stay unsure).
- Combined: each encoder's fold logits pooled with the fast path's per-repository hold-out exactly as
  `train.compare_encoders` does (own temperature, pooling weight and threshold under the 30 % cap).
- Timing: one escalation (batch 1, `--depth` blocks) through each encoder on this thread.

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
    SmolEncoder,
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

SCALE = 20.0
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class SmolLowerStates:
    """The frozen lower layers' output for each text (float16, unpadded), computed once."""

    def __init__(self, encoder: SmolEncoder, texts: Sequence[str], split: int, batch_size: int = 16) -> None:
        from tqdm import tqdm

        torch = encoder.torch
        self.split = split
        ids = [encoder.ids(t)[0] for t in texts]
        self.lengths = np.array([len(i) for i in ids])
        self.states: list[Any] = [None] * len(ids)
        model = encoder.model
        layers = model.layers
        model.layers = layers[: split + 1]  # hidden_states[split] is then the input of layer `split`
        order = np.argsort(self.lengths, kind="stable")
        try:
            with torch.inference_mode(), tqdm(total=len(ids), desc="SmolLM2 lower layers", unit="text",
                                              file=sys.stderr) as bar:
                for start in range(0, len(order), batch_size):
                    rows = order[start : start + batch_size]
                    width = int(self.lengths[rows].max())
                    input_ids = torch.full((len(rows), width), encoder.pad_id, dtype=torch.long)
                    for j, i in enumerate(rows):
                        input_ids[j, : self.lengths[i]] = torch.tensor(ids[i])
                    # right padding under causal attention: a real token never sees a pad
                    hidden = model(input_ids=input_ids, output_hidden_states=True, use_cache=False).hidden_states
                    out = hidden[split]
                    for j, i in enumerate(rows):
                        self.states[i] = out[j, : self.lengths[i]].to(torch.float16).clone()
                    bar.update(len(rows))
        finally:
            model.layers = layers

    def batch(self, rows: Sequence[int], torch: Any):
        """(hidden (B, L, H) float32 right-padded with zeros, index of each row's last token)."""
        longest = int(self.lengths[list(rows)].max())
        hidden = torch.zeros(len(rows), longest, self.states[rows[0]].shape[-1])
        for j, i in enumerate(rows):
            hidden[j, : self.lengths[i]] = self.states[i].float()
        return hidden, torch.as_tensor(self.lengths[list(rows)] - 1)


class SmolTop:
    """The top layers (LoRA-injected) on cached lower states, the final norm, the last token, normalised."""

    def __init__(self, model_dir: Path, split: int, rank: int, alpha: float, depth: int) -> None:
        import torch
        from peft import LoraConfig, inject_adapter_in_model
        from transformers import AutoModel

        self.torch = torch
        model = AutoModel.from_pretrained(model_dir, dtype=torch.float32)
        model.layers = model.layers[:depth]  # a cut model: only the first `depth` blocks, then the norm
        config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=TARGETS,
                            layers_to_transform=list(range(split, depth)), layers_pattern="layers", bias="none")
        self.model = inject_adapter_in_model(config, model)
        self.split = split

    def embed(self, hidden, last):
        torch = self.torch
        positions = torch.arange(hidden.shape[1]).unsqueeze(0).expand(hidden.shape[0], -1)
        rotary = self.model.rotary_emb(hidden, positions)
        for layer in self.model.layers[self.split :]:
            out = layer(hidden, attention_mask=None, position_ids=positions, position_embeddings=rotary)
            hidden = out[0] if isinstance(out, tuple) else out
        hidden = self.model.norm(hidden)
        pooled = hidden[torch.arange(hidden.shape[0]), last]
        return torch.nn.functional.normalize(pooled, dim=-1)


def check_top_matches_full(encoder: SmolEncoder, model_dir: Path, split: int, depth: int,
                           texts: Sequence[str]) -> float:
    """Largest difference between the full model's last-token output and lower states + top stack
    (no LoRA trained yet, so they must agree): guards the hand-run top layers."""
    torch = encoder.torch
    lower = SmolLowerStates(encoder, texts, split)
    top = SmolTop(model_dir, split, rank=8, alpha=16.0, depth=depth)
    hidden, last = lower.batch(list(range(len(texts))), torch)
    with torch.inference_mode():
        ours = top.embed(hidden, last)
        worst = 0.0
        for i, text in enumerate(texts):
            ids = torch.tensor([encoder.ids(text)[0]])
            ref = encoder.model(input_ids=ids, use_cache=False).last_hidden_state[0, -1]
            worst = max(worst, float((torch.nn.functional.normalize(ref, dim=-1) - ours[i]).abs().max()))
    return worst


def fit_fold(lower: SmolLowerStates, top_factory, rows: np.ndarray, y: np.ndarray, w: np.ndarray, n_labels: int,
             epochs: int, lr: float, batch_size: int, seed: int, torch: Any):
    """LoRA + head on `rows` (weighted cross-entropy), as `encoder_tuning.fit` trains MiniLM's."""
    from macaron.router.classifier.encoder_tuning import length_sorted_batches, weighted_step

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    top = top_factory()
    model = top.model.train()
    for name, p in model.named_parameters():
        p.requires_grad = "lora_" in name
    head = torch.nn.Linear(model.config.hidden_size, n_labels)
    params = [p for p in model.parameters() if p.requires_grad] + list(head.parameters())
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    position = {int(r): k for k, r in enumerate(rows)}
    y_t = torch.as_tensor(y, dtype=torch.long)
    w_t = torch.as_tensor(w, dtype=torch.float32)
    plan = [length_sorted_batches(rows, lower.lengths, batch_size, rng) for _ in range(epochs)]
    total = sum(len(p) for p in plan)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=total, pct_start=0.1)
    from tqdm import tqdm

    with tqdm(total=total, desc="  fine-tune", unit="batch", file=sys.stderr) as bar:
        for batches in plan:
            for chunk in batches:
                hidden, last = lower.batch(chunk, torch)
                idx = torch.as_tensor([position[int(r)] for r in chunk])
                weighted_step(optimizer, scheduler, head(top.embed(hidden, last) * SCALE), y_t[idx], w_t[idx])
                bar.update(1)
    model.eval()
    return top, head


def predict(lower: SmolLowerStates, top: SmolTop, head: Any, rows: np.ndarray, torch: Any) -> np.ndarray:
    out = np.zeros((len(rows), head.out_features))
    order = np.argsort(lower.lengths[rows], kind="stable")
    with torch.inference_mode():
        for start in range(0, len(order), 64):
            sel = order[start : start + 64]
            hidden, last = lower.batch(rows[sel], torch)
            out[sel] = head(top.embed(hidden, last) * SCALE).numpy()
    return out


def last_token_state(encoder: SmolEncoder, text: str):
    """One escalation through the whole model: the generation prompt's last token, final-normed."""
    torch = encoder.torch
    with torch.inference_mode():
        ids = torch.tensor([encoder.ids(text)[0]])
        return encoder.model(input_ids=ids, use_cache=False).last_hidden_state[0, -1]


def averaged(first: np.ndarray, second: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Both encoders at once: the mean of their temperature-scaled log-probabilities, recalibrated."""
    from macaron.router.classifier.model import softmax
    from macaron.router.classifier.train import fit_temperature

    mean = 0.5 * np.log(softmax(first / fit_temperature(first, y))) + 0.5 * np.log(softmax(second / fit_temperature(second, y)))
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

    model_dir = smollm_dir(args.model_dir)
    split = args.depth - args.top_layers
    encoder = SmolEncoder(model_dir, args.max_tokens, "chat", n_layers=args.depth)
    worst = check_top_matches_full(encoder, model_dir, split, args.depth, texts[:6])
    say(f"top stack vs full model, last token (normalised): max |diff| {worst:.2e}")
    if worst > 1e-3:
        raise SystemExit("the hand-run top layers do not reproduce the model; refusing to measure")

    def smol() -> np.ndarray:
        lower = SmolLowerStates(encoder, texts, split)
        out = np.zeros((len(y), int(y.max()) + 1))
        for k, fold in enumerate(folds, start=1):
            held = np.where(np.isin(repos, fold))[0]
            kept = np.where(~np.isin(repos, fold))[0]
            say(f"SmolLM2 fold {k}/{len(folds)}: {len(kept)} train, {len(held)} held out")
            weights = source_weights(repos[kept], y[kept], config.full_share_lines)
            top, head = fit_fold(lower, lambda: SmolTop(model_dir, split, 8, 16.0, args.depth), kept, y[kept], weights, len(LABELS),
                                 args.epochs, args.lr, 32, 0, torch)
            out[held] = predict(lower, top, head, held, torch)
        return out

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
    embedder.encode(["warm up"])
    timing = {"minilm_one_escalation": time_calls(lambda b: embedder.encode(b), texts, 1, 30),
              "smollm2_one_escalation": time_calls(lambda b: last_token_state(encoder, b[0]), texts, 1, 30)}

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
