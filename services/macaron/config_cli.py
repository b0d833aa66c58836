"""`macaron config show|docs`: print the effective configuration or its reference."""

from __future__ import annotations

import argparse

import yaml

from macaron.config import load_settings, render_reference


def _run(args: argparse.Namespace) -> int:
    if args.config_command == "docs":
        print(render_reference(), end="")
    else:
        print(yaml.safe_dump(load_settings(args.config).model_dump(mode="json"), sort_keys=False), end="")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("config", help="Show the effective configuration or its reference.")
    parser.add_argument("config_command", choices=["show", "docs"], help="show: effective values; docs: reference.")
    parser.set_defaults(func=_run)
