"""`macaron gateway`: the OpenAI-compatible REST gateway alone (for Kubernetes), on uvicorn.

Settings come from the `gateway:` section (YAML < `MACARON_GATEWAY__*` < these flags); API
keys from `auth:`. On SIGTERM the gateway stops accepting connections, answers new requests on
open connections with 503, lets in-flight streams finish for `gateway.grace_period_s`, then exits.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from macaron.cli_args import add_model_args, explicit_values
from macaron.gateway.settings import GatewaySettings


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds the `gateway` subcommand to the `macaron` parser."""
    parser = subparsers.add_parser(
        "gateway",
        help="serve the OpenAI-compatible REST gateway in front of the router",
        description="Serve /v1/chat/completions (JSON and SSE), /v1/models, /healthz, /readyz, /metrics "
        "and an OpenAPI document; requests reach the router through the gRPC SDK.",
    )
    add_model_args(parser, GatewaySettings)
    parser.set_defaults(func=run)
    return parser


def run(namespace: argparse.Namespace) -> int:
    """Resolves the settings, then serves until a stop signal."""
    from macaron.auth import InsecureBindError
    from macaron.config import ConfigError, load_settings

    try:
        settings = load_settings(namespace.config, overrides={"gateway": explicit_values(namespace, GatewaySettings)})
    except (ConfigError, ValueError) as exc:
        print(f"macaron gateway: {exc}", file=sys.stderr)
        return 2
    from macaron.telemetry import configure_logging

    configure_logging(settings.gateway.log_level)
    from macaron.gateway.server import build_server

    try:
        server = build_server(settings)
    except InsecureBindError as exc:
        print(f"macaron gateway: {exc}", file=sys.stderr)
        return 2
    server.run()
    return 0
