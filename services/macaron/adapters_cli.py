"""`macaron adapters ...`: make specialist adapters, judge them, and roll their versions out.

distill | train NAME | eval (handlers in `macaron.training.cli`): make and judge an adapter;
list | load NAME@VER PATH | canary NAME@VER --share 10 | promote NAME | rollback NAME | unload NAME@VER
(handlers in `macaron.lifecycle.cli`, through a router's admin service).
Imports stay light so `macaron --help` is fast.
"""

from __future__ import annotations

import argparse
import os


def _handler(name: str):  # noqa: ANN202
    def run(args: argparse.Namespace) -> int:
        from macaron.lifecycle import cli

        return getattr(cli, name)(args)

    return run


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Builds the `adapters` group; returns it so other actions (train, eval) can join the group."""
    parser = subparsers.add_parser(
        "adapters", help="Adapters: distill, train, eval; versions: list, load, canary, promote, rollback, unload."
    )
    parser.add_argument("--router", default=os.environ.get("MACARON_ROUTER"),
                        help="Router address host:port (default: router.host:router.port of the config; $MACARON_ROUTER).")
    parser.add_argument("--admin-key", default=os.environ.get("MACARON_ADMIN_KEY"),
                        help="Admin key (router.lifecycle.admin_keys; $MACARON_ADMIN_KEY). Not needed on a loopback "
                        "router without admin keys.")
    parser.add_argument("--timeout", type=float, default=300.0, help="Deadline of the call in seconds.")
    parser.add_argument("--reason", default="", help="Why: recorded in the history with who and when.")
    sub = parser.add_subparsers(dest="adapters_command", metavar="ACTION", required=True)
    parser.actions = sub  # type: ignore[attr-defined]

    ls = sub.add_parser("list", help="Every specialist's stable and canary versions, loaded versions and history.")
    ls.add_argument("--history", type=int, default=5, help="Changes shown per specialist.")
    ls.add_argument("--json", action="store_true", help="Print JSON.")
    ls.set_defaults(func=_handler("list_versions"))

    load = sub.add_parser("load", help="Load NAME@VERSION from PATH on every base-group replica (checked, no traffic yet).")
    load.add_argument("ref", metavar="NAME@VERSION")
    load.add_argument("path", metavar="PATH", help="Adapter directory (PEFT format), as the engines see it.")
    load.set_defaults(func=_handler("load"))

    canary = sub.add_parser("canary", help="Send a share of the specialist's new sessions to NAME@VERSION.")
    canary.add_argument("ref", metavar="NAME@VERSION")
    canary.add_argument("--share", type=float, required=True, help="Percentage of new sessions, (0, 100].")
    canary.set_defaults(func=_handler("canary"))

    promote = sub.add_parser("promote", help="Make the specialist's canary its stable version.")
    promote.add_argument("specialist", metavar="NAME")
    promote.set_defaults(func=_handler("promote"))

    rollback = sub.add_parser("rollback", help="Send all of the specialist's traffic back to stable at once.")
    rollback.add_argument("specialist", metavar="NAME")
    rollback.set_defaults(func=_handler("rollback"))

    unload = sub.add_parser("unload", help="Unload NAME@VERSION once no request uses it any more.")
    unload.add_argument("ref", metavar="NAME@VERSION")
    unload.set_defaults(func=_handler("unload"))

    from macaron.training.cli import add_actions as add_training_actions

    add_training_actions(sub)
    return parser
