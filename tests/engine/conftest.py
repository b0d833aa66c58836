"""Engine test fixtures: the project's tiny model (real files), a Qwen2 variant, HF references."""

from __future__ import annotations

from pathlib import Path

import pytest

from macaron.engine import LLMEngine

from .helpers import HFReference, build_adapter, build_model, make_engine


@pytest.fixture(scope="session")
def tiny_assets(macaron_cache_dir: Path):
    from macaron.assets import ensure_tiny_model

    return ensure_tiny_model(cache_dir=macaron_cache_dir, progress=False)


@pytest.fixture(scope="session")
def qwen_assets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny Qwen2 (q/k/v biases, tied embeddings, sharded safetensors) with two unusual adapters."""
    root = tmp_path_factory.mktemp("qwen2")
    model = build_model(root / "model", arch="qwen2", shard=True)
    return {
        "model": model,
        "qv": build_adapter(model, root / "qv", seed=3, targets=["q_proj", "v_proj"], r=16),
        "mlp": build_adapter(model, root / "mlp", seed=4, targets=["gate_proj", "up_proj", "down_proj", "o_proj"], r=4, rslora=True),
    }


@pytest.fixture(scope="module")
def engine(tiny_assets) -> LLMEngine:
    """A shared engine over the tiny model and its four adapters; tests must leave it idle."""
    eng = make_engine(tiny_assets.model_dir, dict(tiny_assets.adapters))
    yield eng
    assert not eng.has_unfinished()


@pytest.fixture(scope="session")
def tiny_ref(tiny_assets) -> HFReference:
    return HFReference(tiny_assets.model_dir, dict(tiny_assets.adapters))
