"""Publishes a build into the cache once, safely when several processes race for it.

One file lock per build directory serialises builders; the build itself happens in a
temporary sibling directory that is renamed into place only when complete, so a reader never
sees a half-written model, and a crashed build leaves nothing that looks finished.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

from macaron.assets.layout import ModelAssets, assets_in, build_dir_name, is_complete
from macaron.assets.presets import ModelPreset
from macaron.assets.settings import AssetSettings


def models_dir(cache_dir: str | os.PathLike[str] | None) -> Path:
    """`<cache_dir>/models`, with cache_dir defaulting to AssetSettings().cache_dir."""
    base = Path(cache_dir) if cache_dir is not None else Path(AssetSettings().cache_dir)
    return base.expanduser() / "models"


def ensure_assets(
    preset: ModelPreset,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
    force: bool = False,
) -> ModelAssets:
    """Returns the cached build of `preset`, building it first if absent, stale or `force`d."""

    def build(staging: Path) -> None:
        from macaron.assets.build import build_assets  # torch/transformers only when building

        build_assets(preset, staging, progress=progress)

    root = ensure_built(
        build_dir_name(preset), lambda root: is_complete(root, preset), build, cache_dir=cache_dir, force=force
    )
    return assets_in(root)


def ensure_built(
    dir_name: str,
    is_done: Callable[[Path], bool],
    build: Callable[[Path], None],
    cache_dir: str | os.PathLike[str] | None = None,
    force: bool = False,
) -> Path:
    """`<cache>/models/<dir_name>`, built by `build(staging_dir)` under a lock unless `is_done` says
    a finished build is already there. Any recipe (a preset, a converted checkpoint) publishes this way."""
    parent = models_dir(cache_dir)
    root = parent / dir_name
    if not force and is_done(root):
        return root
    parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(parent / f".{root.name}.lock")):
        if not force and is_done(root):  # another process finished it while we waited
            return root
        staging = Path(tempfile.mkdtemp(prefix=f".{root.name}.building-", dir=parent))
        try:
            build(staging)
            _make_readable(staging)
            _replace(staging, root)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return root


def _make_readable(root: Path) -> None:
    """mkdtemp and safetensors create owner-only entries; a cache is shared like any other files."""
    umask = os.umask(0)
    os.umask(umask)
    for path in [root, *root.rglob("*")]:
        path.chmod((0o777 if path.is_dir() else 0o666) & ~umask)


def _replace(staging: Path, root: Path) -> None:
    """Moves `staging` to `root`; an existing (stale or forced) `root` is moved aside first."""
    if root.exists():
        retired = Path(tempfile.mkdtemp(prefix=f".{root.name}.retired-", dir=root.parent))
        os.rename(root, retired / "old")
        shutil.rmtree(retired, ignore_errors=True)
    os.rename(staging, root)
