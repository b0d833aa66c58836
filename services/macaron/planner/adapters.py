"""A PEFT LoRA's cost on a model, from its adapter_config.json alone (no weights needed).

Targets are matched as PEFT matches them: a list names module suffixes, a string is a regular
expression over full module names, "all-linear" is every linear module but the output layer;
layers_to_transform, rank_pattern and exclude_modules are honoured. A LoRA on a module of
in x out at rank r holds r x (in + out) values (A and B).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from macaron.planner.architecture import DTYPE_BYTES, Linear, ModelSpec


@dataclass(frozen=True)
class AdapterSpec:
    """What planning needs from one adapter_config.json."""

    name: str
    rank: int
    target_modules: tuple[str, ...] | str
    rank_pattern: tuple[tuple[str, int], ...] = ()
    layers_to_transform: tuple[int, ...] | None = None
    exclude_modules: tuple[str, ...] | str | None = None

    @property
    def max_rank(self) -> int:
        return max([self.rank, *(r for _, r in self.rank_pattern)])

    def targets(self, module: Linear) -> bool:
        if self.layers_to_transform is not None and module.layer not in self.layers_to_transform:
            return False
        if self.exclude_modules and _matches(self.exclude_modules, module.name):
            return False
        if self.target_modules == "all-linear":
            return True
        return _matches(self.target_modules, module.name)

    def rank_of(self, module: Linear) -> int:
        for key, r in self.rank_pattern:
            if re.fullmatch(rf"(.*\.)?{key}", module.name):
                return r
        return self.rank

    def modules(self, model: ModelSpec) -> list[Linear]:
        return [m for m in model.linears if self.targets(m)]

    def num_params(self, model: ModelSpec) -> int:
        return sum(self.rank_of(m) * (m.in_features + m.out_features) * m.copies for m in self.modules(model))

    def bytes(self, model: ModelSpec, dtype: str | None = None) -> int:
        return self.num_params(model) * DTYPE_BYTES[dtype or model.dtype]

    def unmatched_targets(self, model: ModelSpec) -> list[str]:
        """Entries of a target list that name no module of this model (a typo, or another architecture)."""
        if isinstance(self.target_modules, str):
            return [] if self.target_modules == "all-linear" or self.modules(model) else [self.target_modules]
        return [t for t in self.target_modules if not any(_matches((t,), m.name) for m in model.linears)]


def _matches(targets: tuple[str, ...] | str, name: str) -> bool:
    if isinstance(targets, str):
        return re.fullmatch(targets, name) is not None
    return any(name == t or name.endswith("." + t) for t in targets)


def adapter_from_config(cfg: dict, name: str = "adapter") -> AdapterSpec:
    """The AdapterSpec of a PEFT LoRA config dict; ValueError for other PEFT types."""
    if cfg.get("peft_type", "LORA") != "LORA":
        raise ValueError(f"adapter {name!r}: peft_type {cfg.get('peft_type')!r} is not LORA")
    targets = cfg.get("target_modules") or []
    target_modules: tuple[str, ...] | str = targets if isinstance(targets, str) else tuple(targets)
    layers = cfg.get("layers_to_transform")
    exclude = cfg.get("exclude_modules")
    return AdapterSpec(
        name=name,
        rank=int(cfg["r"]),
        target_modules=target_modules,
        rank_pattern=tuple((k, int(v)) for k, v in (cfg.get("rank_pattern") or {}).items()),
        layers_to_transform=None if layers is None else tuple([layers] if isinstance(layers, int) else layers),
        exclude_modules=exclude if exclude is None or isinstance(exclude, str) else tuple(exclude),
    )


def read_adapter_spec(source: str | Path, name: str | None = None) -> AdapterSpec:
    """`source`: an adapter directory or its adapter_config.json (NAME=PATH names it)."""
    text = str(source)
    if name is None and "=" in text:
        name, text = text.split("=", 1)
    path = Path(text)
    if path.is_dir():
        path = path / "adapter_config.json"
    if not path.is_file():
        raise FileNotFoundError(f"no adapter_config.json at {text!r}")
    return adapter_from_config(json.loads(path.read_text()), name=name or path.parent.name)


def pool_bytes(model: ModelSpec, adapters: list[AdapterSpec], slots: int, rank: int | None = None,
               dtype: str | None = None) -> int:
    """SGLang's GPU LoRA pool: `slots` buffers, each sized for the largest rank over every module
    kind any adapter targets, in every layer that has that kind (experts included)."""
    if not adapters:
        return 0
    r = rank if rank is not None else max(a.max_rank for a in adapters)
    kinds = {m.kind for a in adapters for m in a.modules(model)}
    per_rank = sum((m.in_features + m.out_features) * m.copies for m in model.linears if m.kind in kinds)
    return slots * r * per_rank * DTYPE_BYTES[dtype or model.dtype]
