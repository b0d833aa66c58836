"""`macaron`: one console script, one subcommand per component.

Each component module exposes `add_parser(subparsers)` and sets `func` on its parser; heavy
imports (torch, transformers) happen inside the handlers so `macaron --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

COMMAND_MODULES: tuple[str, ...] = (
    "macaron.assets.cli",
    "macaron.engine.cli",
    "macaron.router.cli",
    "macaron.specialist.cli",
    "macaron.config_cli",
    "macaron.auth.cli",
    "macaron.gateway.cli",
    "macaron.serve_cli",
    "macaron.rayserve.cli",
    "macaron.adapters_cli",
    "macaron.loadgen.cli",
    "macaron.planner.cli",
)


def build_parser() -> argparse.ArgumentParser:
    """The full `macaron` parser with every component's subcommand."""
    parser = argparse.ArgumentParser(prog="macaron", description="Macaron Serve: Mixture-of-LoRA serving.")
    parser.add_argument("--config", help="YAML configuration file (also $MACARON_CONFIG).")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
