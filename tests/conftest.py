"""Fixtures shared by every test area: the Redis URL and the tiny model's files.

Area-specific fixtures live in tests/<area>/conftest.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Tests choose the tiny random model explicitly (exact tokens, seconds to build); the few tests of
# the real default model (SmolLM2) ask for it by name. Subprocesses (`macaron serve`) inherit this.
os.environ.setdefault("MACARON_ENGINE__BUILTIN_MODEL", "tiny")


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The Redis that scripts/test made sure answers (REDIS_URL), else the machine's default."""
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    import redis

    try:
        redis.Redis.from_url(url, socket_timeout=1).ping()
    except Exception as exc:  # pragma: no cover - depends on the machine
        pytest.fail(f"no Redis answers at {url} ({exc}); run the tests through scripts/test, which starts one")
    return url


@pytest.fixture(scope="session")
def macaron_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Cache directory for built assets: $MACARON_CACHE_DIR when set (reused across runs), else a temp dir."""
    if os.environ.get("MACARON_CACHE_DIR"):
        return Path(os.environ["MACARON_CACHE_DIR"])
    return tmp_path_factory.mktemp("macaron-cache")


@pytest.fixture(scope="session")
def tiny_model(macaron_cache_dir: Path):
    """The tiny model and its four adapters, built once per session into the session's cache."""
    from macaron.assets import ensure_tiny_model

    return ensure_tiny_model(cache_dir=macaron_cache_dir, progress=False)


@pytest.fixture(scope="session")
def tokenizer(tiny_model):
    """The tiny model's tokenizer (with its chat template)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model.model_dir))
