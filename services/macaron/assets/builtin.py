"""The project's own models by name: what an engine serves when no model_path is given."""

from __future__ import annotations

import os
from typing import Literal

from macaron.assets.layout import ModelAssets

BuiltinModel = Literal["smollm2", "tiny", "bench"]
BUILTIN_MODELS: tuple[str, ...] = ("smollm2", "tiny", "bench")


def ensure_builtin_model(
    name: str, cache_dir: str | os.PathLike[str] | None = None, progress: bool = True
) -> ModelAssets:
    """smollm2: the real default (SmolLM2-135M-Instruct and the four trained specialists);
    tiny: random weights, for exact-token tests; bench: random weights at ~106 M parameters."""
    if name == "smollm2":
        from macaron.assets.smollm2 import ensure_smollm2_model

        return ensure_smollm2_model(cache_dir, progress=progress)
    if name == "tiny":
        from macaron.assets.tiny import ensure_tiny_model

        return ensure_tiny_model(cache_dir, progress=progress)
    if name == "bench":
        from macaron.assets.tiny import ensure_bench_model

        return ensure_bench_model(cache_dir, progress=progress)
    raise ValueError(f"unknown built-in model {name!r}; choose one of {', '.join(BUILTIN_MODELS)}")
