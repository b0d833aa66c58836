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


def newest_versions(adapters: dict[str, object]) -> dict[str, str]:
    """{specialist: version} of the newest `NAME@VERSION` adapter per specialist (`ui@v2` → {"ui": "v2"}):
    what serves by default when the built-in model ships more than one version of a specialist."""
    newest: dict[str, str] = {}
    for key in adapters:
        name, sep, version = key.partition("@")
        if sep and (name not in newest or _order(version) > _order(newest[name])):
            newest[name] = version
    return newest


def _order(version: str) -> tuple[int, str]:
    digits = "".join(c for c in version if c.isdigit())
    return (int(digits) if digits else -1, version)
