"""`macaron specialist --name NAME`: serve one specialist profile (or several, or `all`) over gRPC.

Settings come from the `specialists:` section (YAML < `MACARON_SPECIALISTS__*` < these flags).
Each profile listens on its own port (specialists.<name>.port; 50061-50064 by default).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from macaron.ports import SPECIALISTS


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds the `specialist` subcommand to the `macaron` parser."""
    parser = subparsers.add_parser(
        "specialist",
        help="serve a specialist pool replica (chat, agent, code or ui) over gRPC",
        description="Serve specialist profiles as macaron.v1.Specialist gRPC services over the shared "
        "base-weight group, with health and reflection. SIGTERM drains in-flight streams.",
    )
    parser.add_argument(
        "--name",
        action="append",
        required=True,
        choices=[*SPECIALISTS, "all"],
        help="Profile to serve; repeat for several in one process, or `all` for the four.",
    )
    parser.add_argument("--host", help="Bind address (specialists.host).")
    parser.add_argument("--port", type=int, help="gRPC port; only with a single --name (specialists.<name>.port).")
    parser.add_argument(
        "--engine-url",
        action="append",
        help="Base-group URL; repeat for several replicas (sets discovery mode static with these urls).",
    )
    parser.add_argument("--grace-period-s", type=float, help="Drain time on SIGTERM (specialists.grace_period_s).")
    parser.set_defaults(func=run)
    return parser


def _overrides(args: argparse.Namespace, names: list[str]) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if args.host:
        spec["host"] = args.host
    if args.port is not None:
        spec[names[0]] = {"port": args.port}
    if args.engine_url:
        spec["discovery"] = {"mode": "static", "urls": args.engine_url}
    if args.grace_period_s is not None:
        spec["grace_period_s"] = args.grace_period_s
    return {"specialists": spec} if spec else {}


def run(args: argparse.Namespace) -> int:
    """Resolves the settings, then serves until a stop signal."""
    from macaron.config import ConfigError, load_settings

    names = list(SPECIALISTS) if "all" in args.name else list(dict.fromkeys(args.name))
    if args.port is not None and len(names) != 1:
        print("macaron specialist: --port needs exactly one --name", file=sys.stderr)
        return 2
    try:
        settings = load_settings(args.config, overrides=_overrides(args, names))
    except (ConfigError, ValueError) as exc:
        print(f"macaron specialist: {exc}", file=sys.stderr)
        return 2
    from macaron.specialist.server import serve

    asyncio.run(serve(settings, names))
    return 0
