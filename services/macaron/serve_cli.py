"""`macaron serve`: the whole stack in one process (engine, four specialists, router, gateway).

    macaron serve                 # gateway on 127.0.0.1:8080, dev mode without API keys
    macaron serve --port 9090     # another gateway port (internal ports are found automatically)
    macaron --config examples/macaron.yaml serve

Settings: the YAML file < `MACARON_*` environment variables < these flags; `$REDIS_URL`
switches the shared state to Redis.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds the `serve` subcommand to the `macaron` parser."""
    parser = subparsers.add_parser(
        "serve",
        help="start the whole stack on this machine (engine, specialists, router, gateway)",
        description="Start the embedded engine (building the tiny model if absent), the four specialists, the "
        "router and the OpenAI-compatible gateway in one process; Ctrl-C stops everything cleanly.",
    )
    parser.add_argument("--host", help="Gateway bind address (gateway.host; default 127.0.0.1). "
                        "Any non-loopback address requires auth.api_keys.")
    parser.add_argument("--port", type=int, help="Gateway port (gateway.port; default 8080; 0: any free port).")
    parser.add_argument("--no-progress", action="store_true", help="No progress bar while building the tiny model.")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Resolves the settings, then runs the stack until Ctrl-C / SIGTERM."""
    import asyncio

    from macaron.auth import InsecureBindError
    from macaron.config import ConfigError, load_settings
    from macaron.serve import PortInUseError, serve
    from macaron.telemetry import configure_logging

    gateway: dict[str, Any] = {}
    if args.host:
        gateway["host"] = args.host
    if args.port is not None:
        gateway["port"] = args.port
    overrides: dict[str, Any] = {"gateway": gateway} if gateway else {}
    if args.no_progress:
        overrides["serve"] = {"progress": False}
    try:
        settings = load_settings(args.config, overrides=overrides)
    except (ConfigError, ValueError) as exc:
        print(f"macaron serve: {exc}", file=sys.stderr)
        return 2
    configure_logging("info")
    try:
        asyncio.run(serve(settings))
    except (InsecureBindError, PortInUseError) as exc:
        print(f"macaron serve: {exc}", file=sys.stderr)
        return 2
    return 0
