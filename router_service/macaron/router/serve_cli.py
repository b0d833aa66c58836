"""`macaron router serve` (and plain `macaron router`): the L0 router's gRPC server.

Flags are generated from RouterSettings (`--policy`, `--switch-threshold`, ...) and override
YAML and `MACARON_ROUTER__*`; `--redis-url` sets the shared store. `router/cli.py` hooks these
two functions into its `router` command.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any, Coroutine

from macaron.cli_args import add_model_args, explicit_values


def add_serve_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Adds the serve flags (one per RouterSettings field, plus --redis-url) to `parser`."""
    from macaron.router.settings import RouterSettings

    add_model_args(parser, RouterSettings)
    parser.add_argument("--redis-url", dest="redis_url", default=argparse.SUPPRESS,
                        help="Redis for sessions, limits and versions (redis_url); empty: in-process store.")
    parser.add_argument("--cache-redis-url", dest="cache_redis_url", default=argparse.SUPPRESS,
                        help="Redis for placement state: KV-cache index, affinity, load (cache_redis_url); "
                        "empty: the redis_url server.")
    parser.set_defaults(func=run_serve)
    return parser


def run_serve(args: argparse.Namespace) -> int:
    """Resolves the settings, then serves until SIGTERM/SIGINT (and drains)."""
    from macaron.config import ConfigError, load_settings
    from macaron.router.settings import RouterSettings

    overrides: dict = {}
    router = explicit_values(args, RouterSettings)
    if router:
        overrides["router"] = router
    if getattr(args, "redis_url", None):
        overrides["redis_url"] = args.redis_url
    if getattr(args, "cache_redis_url", None):
        overrides["cache_redis_url"] = args.cache_redis_url
    try:
        settings = load_settings(getattr(args, "config", None), overrides=overrides)
    except (ConfigError, ValueError) as exc:
        print(f"macaron router: {exc}", file=sys.stderr)
        return 2
    from macaron.router.server import serve
    from macaron.telemetry import configure_logging

    # request ids on every line, and not one httpx line per engine poll (inventory, KV-event follower) on the
    # event loop that serves requests
    configure_logging("info")
    run_loop(serve(settings), settings.router.event_loop)
    return 0


def run_loop(main: Coroutine[Any, Any, None], kind: str) -> None:
    """Runs the router's coroutine on uvloop (auto: where installed) or asyncio."""
    if kind != "asyncio":
        try:
            import uvloop
        except ImportError:
            if kind == "uvloop":
                main.close()
                raise SystemExit("macaron router: router.event_loop is uvloop, but uvloop is not installed") from None
        else:
            uvloop.run(main)
            return
    asyncio.run(main)
