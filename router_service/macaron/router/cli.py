"""`macaron router [serve|train|eval]`: the L0 router's gRPC server and its classifier tools.

Plain `macaron router` serves, as the Helm chart runs it.
"""

from __future__ import annotations

import argparse

from macaron.router.serve_cli import add_serve_arguments


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("router", help="Serve the L0 router (default) or train/evaluate its classifier.")
    add_serve_arguments(parser)
    sub = parser.add_subparsers(dest="router_command", metavar="SUBCOMMAND")
    add_serve_arguments(sub.add_parser("serve", help="Serve the L0 router over gRPC (the default)."))
