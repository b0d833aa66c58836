"""`macaron keys create [--name NAME]`: a new API key and the config entry holding its hash."""

from __future__ import annotations

import argparse

import yaml

from macaron.auth.keys import hash_api_key, new_api_key


def _run(args: argparse.Namespace) -> int:
    key = new_api_key()
    entry = {"name": args.name, "sha256": hash_api_key(key)}
    if args.requests_per_minute:
        entry["requests_per_minute"] = args.requests_per_minute
    print(f"API key (shown once; give it to '{args.name}'):\n  {key}\n")
    print("Add this to your config under auth.api_keys:")
    print(yaml.safe_dump({"auth": {"api_keys": [entry]}}, sort_keys=False), end="")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("keys", help="Manage API keys.")
    sub = parser.add_subparsers(dest="keys_command", required=True)
    create = sub.add_parser("create", help="Create a key and print the hash to configure.")
    create.add_argument("--name", required=True, help="Owner of the key (team or app).")
    create.add_argument("--requests-per-minute", type=int, default=None, help="Per-key limit.")
    create.set_defaults(func=_run)
