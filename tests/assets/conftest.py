"""Fixtures of the asset tests: the tiny model built once per session, and single-threaded torch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from macaron.assets import ModelAssets, ensure_tiny_model


@pytest.fixture(scope="session")
def tiny_assets(macaron_cache_dir: Path) -> ModelAssets:
    """The tiny model and its adapters, built into the session's cache directory."""
    return ensure_tiny_model(macaron_cache_dir, progress=False)


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Tiny matmuls run fastest on one thread, and far slower with two on a busy 2-core machine."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
