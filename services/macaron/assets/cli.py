"""`macaron assets build`: builds the tiny (or benchmark) model and its adapters into the cache."""

from __future__ import annotations

import argparse


def _build(args: argparse.Namespace) -> int:
    from macaron.assets.tiny import ensure_bench_model, ensure_tiny_model

    cache_dir = args.cache_dir
    if cache_dir is None:  # the configuration (YAML, environment) decides
        from macaron.config import load_settings

        cache_dir = load_settings(getattr(args, "config", None)).assets.cache_dir
    ensure = ensure_bench_model if args.bench else ensure_tiny_model
    assets = ensure(cache_dir=cache_dir, progress=not args.quiet, force=args.force)
    print(f"model    {assets.model_dir}")
    for name, path in assets.adapters.items():
        print(f"adapter  {name}={path}")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds `assets build` to the `macaron` command."""
    parser = subparsers.add_parser("assets", help="Build the project's own model and LoRA adapters.")
    commands = parser.add_subparsers(dest="assets_command", metavar="ACTION", required=True)
    build = commands.add_parser(
        "build", help="Build the tiny model (or --bench) and its four adapters; print their paths."
    )
    build.add_argument("--cache-dir", help="Cache directory (default: assets.cache_dir of the configuration).")
    build.add_argument("--bench", action="store_true", help="Build the ~106 M-parameter benchmark model instead.")
    build.add_argument("--force", action="store_true", help="Build again even when the cache holds this recipe.")
    build.add_argument("--quiet", action="store_true", help="No progress bar.")
    build.set_defaults(func=_build)
