"""`macaron adapters distill | train | eval`: make and judge specialist adapters.

Each prints a table or a progress bar while it works and one JSON object as its last line.
Without --model the base is the configured built-in model (engine.builtin_model).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from macaron.assets.presets import ADAPTER_NAMES


def _base_model(args: argparse.Namespace) -> tuple[str, dict[str, str]]:
    """(model directory, {name: adapter dir}) from --model, else the configured built-in model."""
    if getattr(args, "model", None):
        return args.model, {}
    from macaron.assets.builtin import ensure_builtin_model
    from macaron.config import load_settings

    settings = load_settings(getattr(args, "config", None))
    if settings.engine.model_path:
        return settings.engine.model_path, {}
    assets = ensure_builtin_model(settings.engine.builtin_model, settings.assets.cache_dir, progress=not args.quiet)
    return str(assets.model_dir), {name: str(path) for name, path in assets.adapters.items()}


def _names(value: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in ADAPTER_NAMES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"specialists are a comma list of {', '.join(ADAPTER_NAMES)}; got {value!r}")
    return names


def _share(value: str) -> float:
    try:
        share = float(value)
    except ValueError:
        share = -1.0
    if not 0.0 <= share <= 1.0:
        raise argparse.ArgumentTypeError(f"a share is a number from 0 to 1; got {value!r}")
    return share


def _distill(args: argparse.Namespace) -> int:
    from macaron.training.distill import distill
    from macaron.training.tasks import task

    model_dir, _ = _base_model(args)
    tasks = [task(n, without_tools_share=args.without_tools) for n in args.specialists]
    provenance = distill(model_dir, tasks, Path(args.out), args.per_specialist,
                         seed=args.seed, progress=not args.quiet)
    print(json.dumps({name: {k: v for k, v in p.items() if k != "sources"} for name, p in provenance["specialists"].items()}))
    return 0


def _train(args: argparse.Namespace) -> int:
    from macaron.training.examples import TrainingDataError
    from macaron.training.lora_train import TrainConfig, train_adapter

    model_dir, _ = _base_model(args)
    config = TrainConfig(
        rank=args.rank, alpha=args.alpha or 2 * args.rank, steps=args.steps, batch_size=args.batch_size,
        learning_rate=args.lr, max_length=args.max_length, seed=args.seed, num_threads=args.threads,
        target_modules=tuple(args.target_modules.split(",")),
    )
    try:
        result = train_adapter(model_dir, args.data, args.out, config, name=args.name, progress=not args.quiet)
    except (TrainingDataError, ValueError) as exc:
        print(f"macaron adapters train: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({k: v for k, v in vars(result).items() if k != "config"}))
    return 0


def _eval(args: argparse.Namespace) -> int:
    from macaron.training.evaluate import evaluate, summary, table
    from macaron.training.tasks import task

    model_dir, adapters = _base_model(args)
    for spec in args.adapter or []:
        name, sep, path = spec.partition("=")
        if not sep or name.partition("@")[0] not in ADAPTER_NAMES:
            print(f"macaron adapters eval: --adapter takes NAME=DIR or NAME@VERSION=DIR with NAME one of "
                  f"{', '.join(ADAPTER_NAMES)}", file=sys.stderr)
            return 2
        adapters[name] = path
    names = [n for n in args.specialists if any(k.partition("@")[0] == n for k in adapters)]
    if not names:
        print("macaron adapters eval: no adapter to evaluate; pass --adapter NAME=DIR", file=sys.stderr)
        return 2
    chosen = {k: v for k, v in adapters.items() if k.partition("@")[0] in names}
    scores = evaluate(model_dir, chosen, [task(n, without_tools_share=args.without_tools) for n in names], args.per_specialist,
                      seed=args.seed, progress=not args.quiet, base_arms=not args.no_base,
                      served=args.served)
    print(table(scores))
    print(json.dumps(summary(scores)))
    return 0


def add_actions(commands: Any) -> None:
    """Adds distill, train and eval to the `macaron adapters` group."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--model", help="Base model directory (default: the configured built-in model).")
    common.add_argument("--seed", type=int, default=0, help="Seed of prompt sampling and training (default 0).")
    common.add_argument("--quiet", action="store_true", help="No progress bars.")
    common.add_argument("--without-tools", type=_share, default=0.0, metavar="SHARE",
                        help="agent: the share of prompts asked with no tools offered (0–1, default 0); their "
                        "teacher answers in prose, and eval counts a finished prose answer for them.")

    p = commands.add_parser("distill", parents=[common], help="Build specialists' training data with the base as teacher.")
    p.add_argument("--out", required=True, help="Folder for <name>.jsonl files and provenance.json.")
    p.add_argument("--specialists", type=_names, default=list(ADAPTER_NAMES), help="Comma list (default: all four).")
    p.add_argument("--per-specialist", type=int, default=64, help="Prompts per specialist (default 64).")
    p.set_defaults(func=_distill)

    p = commands.add_parser("train", parents=[common], help="Train one LoRA adapter on a JSONL file (CPU).")
    p.add_argument("name", help="Adapter name written in its card (e.g. code, or code@v2).")
    p.add_argument("--data", required=True, help="JSONL of {messages, tools, target} lines.")
    p.add_argument("--out", required=True, help="Output folder (a standard PEFT adapter directory).")
    p.add_argument("--rank", type=int, default=8, help="LoRA rank (default 8).")
    p.add_argument("--alpha", type=int, default=None, help="LoRA alpha (default 2 × rank).")
    p.add_argument("--steps", type=int, default=120, help="Optimizer steps (default 120).")
    p.add_argument("--batch-size", type=int, default=4, help="Examples per step (default 4).")
    p.add_argument("--lr", type=float, default=1e-3, help="Peak learning rate (default 1e-3; warm-up, cosine).")
    p.add_argument("--max-length", type=int, default=768, help="Longest example in tokens (default 768).")
    p.add_argument("--threads", type=int, default=None, help="Torch threads (default: torch's).")
    p.add_argument("--target-modules", default="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
                   help="Comma list of projections to adapt (default: all seven).")
    p.set_defaults(func=_train)

    p = commands.add_parser("eval", parents=[common], help="Held-out figures: adapter vs bare base vs base with profile.")
    p.add_argument("--adapter", action="append", metavar="NAME[@VERSION]=DIR",
                   help="Adapter to judge (default: the built-in model's); several versions of one are compared in one run.")
    p.add_argument("--specialists", type=_names, default=list(ADAPTER_NAMES), help="Comma list (default: all four).")
    p.add_argument("--per-specialist", type=int, default=24, help="Held-out prompts per specialist (default 24).")
    p.add_argument("--no-base", action="store_true",
                   help="Only the adapters' arms (e.g. comparing two versions), not the bare base's.")
    p.add_argument("--served", action="store_true",
                   help="Ask as the specialist serves by default (ui: its bounded A2UI grammar, strays pruned), "
                   "not unconstrained.")
    p.set_defaults(func=_eval)
