"""`macaron adapters ...`: make, judge and roll out specialist adapters."""

from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds the `adapters` group to the `macaron` command."""
    from macaron.training.cli import add_actions as add_training_actions

    parser = subparsers.add_parser("adapters", help="Make (distill, train), judge (eval) specialist adapters.")
    commands = parser.add_subparsers(dest="adapters_command", metavar="ACTION", required=True)
    add_training_actions(commands)
