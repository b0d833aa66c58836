"""`scripts/generate`: regenerates every generated file of the repository in one command.

Each generator maps a repository-relative path to its fresh content; `check()` compares them
with what is committed, so a test fails as soon as a generated file is stale or hand-edited.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parents[3]

Generator = Callable[[], dict[str, bytes]]


def _config_reference() -> dict[str, bytes]:
    from macaron.config import render_reference

    return {"docs/configuration.md": render_reference().encode()}


def generators() -> dict[str, Generator]:
    """Name → generator; add new generated artifacts here."""
    found: dict[str, Generator] = {"config-reference": _config_reference}
    try:
        from macaron.protos_codegen import generate_protos
    except ImportError:
        pass
    else:
        found["protos"] = generate_protos
    from macaron.devtools.k8s_manifests import render_k8s_manifests

    found["k8s-manifests"] = render_k8s_manifests
    from macaron.devtools.rayservice import render_rayservice

    found["rayservice"] = render_rayservice
    return found


def render_all() -> dict[str, bytes]:
    """Every generated file's fresh content, by repository-relative path."""
    files: dict[str, bytes] = {}
    for generate in generators().values():
        files.update(generate())
    return files


def stale_files(root: Path = REPO_ROOT) -> list[str]:
    """Paths whose committed content differs from a fresh generation."""
    return sorted(
        path
        for path, content in render_all().items()
        if not (root / path).is_file() or (root / path).read_bytes() != content
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="Only report stale files; exit 1 if any.")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files()
        for path in stale:
            print(f"stale: {path} (run scripts/generate)")
        return 1 if stale else 0
    for path, content in render_all().items():
        target = REPO_ROOT / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_file() or target.read_bytes() != content:
            target.write_bytes(content)
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
