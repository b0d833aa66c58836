"""Where built assets (tiny model, adapters, router artifacts) are cached."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


def default_cache_dir() -> str:
    """`$MACARON_CACHE_DIR`, else `$XDG_CACHE_HOME/macaron`, else `~/.cache/macaron`."""
    if os.environ.get("MACARON_CACHE_DIR"):
        return os.environ["MACARON_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(base) / "macaron")


class AssetSettings(BaseModel):
    """Settings of the asset builder."""

    model_config = ConfigDict(extra="forbid")

    cache_dir: str = Field(
        default_factory=default_cache_dir,
        description="Directory where `macaron assets build` writes the tiny model, its adapters and router artifacts.",
    )
