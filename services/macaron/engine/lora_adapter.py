"""A PEFT LoRA directory read and checked against the base model: the LoRAAdapter the engine holds.

Supported: peft_type LORA on per-layer projections (q/k/v/o/gate/up/down), any rank, rsLoRA,
rank_pattern / alpha_pattern, safetensors or .bin weights. Refused with a clear message: DoRA,
fan_in_fan_out, trained biases, modules_to_save, embeddings or lm_head adapters, shapes that do
not fit the base (an adapter trained on another model).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import torch

from macaron.engine.models.llama import LORA_MODULES, PROJECTIONS, ModelShape

_KEY = re.compile(
    r"^(?:base_model\.model\.)?model\.layers\.(\d+)\.(?:self_attn|mlp)\.(\w+)\.lora_([AB])(?:\.default)?\.weight$"
)


class LoRAError(ValueError):
    """An adapter that cannot be loaded or used; the message says why."""


class LoRAExpand(NamedTuple):
    """One module's expand after a shrink: out[:, cols] += xa[:, ranks] @ bt."""

    ranks: slice | None
    """Its columns of the shrink's output (its rows of the stacked A); None: all of them."""
    cols: slice | None
    """Its columns of the fused projection's output; None: all of them."""
    bt: torch.Tensor
    """B transposed, [r, out], scaling included."""


class LoRAShrink(NamedTuple):
    """A shrink matmul and the expands that read it: xa = x @ a_t, then each expand.

    a_t holds A transposed ([in, r], or [in, sum of r] for the modules of one fused projection
    stacked side by side, S-LoRA/Punica style): one matmul shrinks every module that reads the
    same input, and a [rows, in] @ [in, r] matmul on a contiguous right-hand side is what MKL runs
    fastest at decode sizes (1.5-2x the same product through A.t())."""

    a_t: torch.Tensor
    expands: tuple[LoRAExpand, ...]


@dataclass(eq=False)
class LoRAAdapter:
    """One loaded adapter: its weights (B already scaled) and who uses it."""

    name: str
    path: str
    rank: int
    target_modules: frozenset[str]
    weights: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]]
    """(layer, module) -> (A [r, in], B transposed [r, out] * scaling): the host copy, on CPU. Once
    `fused`, each A is a view into its projection's stacked A (same values, no second copy)."""
    pinned: bool = False
    cache_key: str = ""
    num_requests: int = 0
    """Unfinished requests (queued or running) using this adapter; unload waits for zero."""
    unloading: bool = False
    slot: int = -1
    _fused: dict[tuple[int, str], LoRAShrink] | None = field(default=None, repr=False)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes + bt.nbytes for a, bt in self.weights.values())

    def fused(self, shape: ModelShape) -> dict[tuple[int, str], LoRAShrink]:
        """(layer, projection) -> its LoRAShrink (`PROJECTIONS`): each projection's targeted modules'
        A stacked transposed into one tensor. Built once; `weights` then holds views into it, so
        nothing is held twice (nbytes unchanged)."""
        if self._fused is None:
            self._fused = fuse_weights(self.weights, shape)
        return self._fused

    def module_rank(self, layer: int, module: str) -> int:
        """Rank of one projection (rank_pattern may differ per layer); 0 when not targeted."""
        w = self.weights.get((layer, module))
        return 0 if w is None else int(w[0].shape[0])


def read_adapter(name: str, path: str | Path, shape: ModelShape, dtype: torch.dtype) -> LoRAAdapter:
    """Reads and checks a PEFT LoRA directory against the base model's shapes (no engine state)."""
    root = Path(path)
    cfg_file = root / "adapter_config.json"
    if not cfg_file.is_file():
        raise LoRAError(f"adapter {name!r}: no adapter_config.json in {root}")
    cfg = json.loads(cfg_file.read_text())
    if cfg.get("peft_type", "LORA") != "LORA":
        raise LoRAError(f"adapter {name!r}: peft_type {cfg.get('peft_type')!r} is not LORA")
    for flag, bad in (("fan_in_fan_out", True), ("use_dora", True)):
        if cfg.get(flag) == bad:
            raise LoRAError(f"adapter {name!r}: {flag}={bad} is not supported")
    if cfg.get("bias", "none") != "none" or cfg.get("modules_to_save"):
        raise LoRAError(f"adapter {name!r}: bias training and modules_to_save are not supported")
    r_default = int(cfg["r"])
    alpha_default = float(cfg.get("lora_alpha", r_default))
    rank_pattern = cfg.get("rank_pattern") or {}
    alpha_pattern = cfg.get("alpha_pattern") or {}
    rslora = bool(cfg.get("use_rslora", False))

    tensors = _read_tensors(root)
    pairs: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        m = _KEY.match(key)
        if m is None:
            raise LoRAError(f"adapter {name!r}: unsupported weight {key!r} (only per-layer projections)")
        layer, module, ab = int(m.group(1)), m.group(2), m.group(3)
        if module not in LORA_MODULES:
            raise LoRAError(f"adapter {name!r}: target {module!r} is not one of {sorted(LORA_MODULES)}")
        if layer >= shape.num_layers:
            raise LoRAError(f"adapter {name!r}: layer {layer} but the model has {shape.num_layers}")
        pairs.setdefault((layer, module), {})[ab] = value

    weights: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = {}
    max_rank = 0
    for (layer, module), ab in sorted(pairs.items()):
        if set(ab) != {"A", "B"}:
            raise LoRAError(f"adapter {name!r}: layer {layer} {module} lacks lora_A or lora_B")
        a, b = ab["A"], ab["B"]
        in_f, out_f = shape.in_out(module)
        r = a.shape[0]
        if a.shape != (r, in_f) or b.shape != (out_f, r):
            raise LoRAError(
                f"adapter {name!r}: layer {layer} {module} has A {tuple(a.shape)} / B {tuple(b.shape)}, "
                f"the model needs ({r}, {in_f}) / ({out_f}, {r}); was it trained on another base?"
            )
        full_name = f"model.layers.{layer}.{'mlp' if module in ('gate_proj', 'up_proj', 'down_proj') else 'self_attn'}.{module}"
        expected_r = _pattern_value(rank_pattern, full_name, r_default)
        alpha = float(_pattern_value(alpha_pattern, full_name, alpha_default))
        if r != expected_r:
            raise LoRAError(f"adapter {name!r}: {full_name} has rank {r}, the config says {expected_r}")
        scaling = alpha / math.sqrt(r) if rslora else alpha / r
        weights[(layer, module)] = (
            a.to(dtype).contiguous(),
            (b.to(torch.float32) * scaling).t().to(dtype).contiguous(),
        )
        max_rank = max(max_rank, r)
    if not weights:
        raise LoRAError(f"adapter {name!r}: no LoRA weights found in {root}")
    adapter = LoRAAdapter(
        name=name,
        path=str(root),
        rank=max_rank,
        target_modules=frozenset(m for _, m in weights),
        weights=weights,
    )
    adapter.fused(shape)  # the layout the forward pass reads, built once at load
    return adapter


def fuse_weights(
    weights: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]], shape: ModelShape
) -> dict[tuple[int, str], LoRAShrink]:
    """Stacks each projection's A matrices (transposed, side by side) per layer and points
    `weights` at views of the stacked tensors (in place); returns (layer, projection) -> LoRAShrink."""
    fused: dict[tuple[int, str], LoRAShrink] = {}
    for layer in range(shape.num_layers):
        for projection, modules in PROJECTIONS.items():
            present = [m for m in modules if (layer, m) in weights]
            if not present:
                continue
            a_t = torch.cat([weights[(layer, m)][0] for m in present]).t().contiguous()
            columns = shape.columns(projection)
            whole = len(modules) == 1
            expands = []
            lo = 0
            for m in present:
                bt = weights[(layer, m)][1]
                hi = lo + bt.shape[0]
                first, end = columns[m]
                ranks = None if len(present) == 1 else slice(lo, hi)
                expands.append(LoRAExpand(ranks, None if whole else slice(first, end), bt))
                weights[(layer, m)] = (a_t[:, lo:hi].t(), bt)
                lo = hi
            fused[(layer, projection)] = LoRAShrink(a_t, tuple(expands))
    return fused


def _pattern_value(pattern: dict[str, object], module_name: str, default: object) -> object:
    for key, value in pattern.items():
        if re.fullmatch(rf"(.*\.)?{key}", module_name):
            return value
    return default


def _read_tensors(root: Path) -> dict[str, torch.Tensor]:
    st = root / "adapter_model.safetensors"
    if st.is_file():
        from safetensors.torch import load_file

        return load_file(str(st))
    pt = root / "adapter_model.bin"
    if pt.is_file():
        return torch.load(pt, map_location="cpu", weights_only=True)
    raise LoRAError(f"no adapter_model.safetensors (or .bin) in {root}")
