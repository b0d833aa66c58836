"""The public entry points: `ensure_tiny_model()` and `ensure_bench_model()`.

Both return a `ModelAssets` (model directory + adapter directories) that is built on first use
and cached; importing this module does not import torch.
"""

from __future__ import annotations

import os

from macaron.assets.cache import ensure_assets
from macaron.assets.layout import ModelAssets
from macaron.assets.presets import ADAPTER_NAMES, BENCH, TINY

__all__ = ["ADAPTER_NAMES", "ModelAssets", "ensure_bench_model", "ensure_tiny_model"]


def ensure_tiny_model(
    cache_dir: str | os.PathLike[str] | None = None, progress: bool = True, force: bool = False
) -> ModelAssets:
    """The tiny GQA Llama (~0.3 M parameters) and its four rank-8 adapters; builds in seconds."""
    return ensure_assets(TINY, cache_dir=cache_dir, progress=progress, force=force)


def ensure_bench_model(
    cache_dir: str | os.PathLike[str] | None = None, progress: bool = True, force: bool = False
) -> ModelAssets:
    """The benchmark-size model (~106 M parameters, 12 layers) and its four rank-16 adapters."""
    return ensure_assets(BENCH, cache_dir=cache_dir, progress=progress, force=force)
