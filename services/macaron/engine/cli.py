"""`macaron engine`: the embedded engine behind SGLang's native HTTP API, on uvicorn.

Flags are generated from EngineArgs (`--host --port --model-path --lora-paths chat=DIR ...`),
so they read like `python -m sglang.launch_server`'s. Settings come from defaults < the YAML
file given to the top-level `--config` (section `engine:`) < `MACARON_ENGINE__*` environment
variables < these flags. SIGINT/SIGTERM stop taking connections, let running requests finish
(up to GRACEFUL_SHUTDOWN_S), then shut the engine down.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from macaron.cli_args import add_model_args, explicit_values
from macaron.engine.args import EngineArgs

GRACEFUL_SHUTDOWN_S = 30
"""How long in-flight requests may keep running after a stop signal."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds the `engine` subcommand to the `macaron` parser."""
    parser = subparsers.add_parser(
        "engine",
        help="serve the embedded engine (SGLang's native HTTP API) on CPU",
        description="Serve one base model plus LoRA adapters over SGLang's native HTTP API "
        "(/generate, /load_lora_adapter, /health, /metrics, ...). "
        "Without --model-path: the built-in model (--builtin-model, SmolLM2-135M-Instruct by default) and its four adapters.",
    )
    add_model_args(parser, EngineArgs)
    parser.set_defaults(func=run)
    return parser


def run(namespace: argparse.Namespace) -> int:
    """Resolves the settings, then serves until a stop signal."""
    from macaron.config import ConfigError, load_settings

    try:
        settings = load_settings(namespace.config, overrides={"engine": explicit_values(namespace, EngineArgs)})
    except (ConfigError, ValueError) as exc:
        print(f"macaron engine: {exc}", file=sys.stderr)
        return 2
    serve(settings.engine)
    return 0


def serve(args: EngineArgs) -> None:
    """Builds the engine and its app and runs uvicorn on args.host:args.port (blocking)."""
    import uvicorn

    from macaron.engine.async_engine import AsyncLLMEngine
    from macaron.engine.http_server import create_app

    engine = AsyncLLMEngine.from_args(args)
    app = create_app(engine, args)
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        lifespan="on",
    )
    server = uvicorn.Server(config)
    original = server.handle_exit

    def handle_exit(sig: int, frame: Any) -> None:
        app.state.server.drain()  # as SGLang: health turns 503 at once, so routers stop sending
        original(sig, frame)

    server.handle_exit = handle_exit  # type: ignore[method-assign]
    server.run()
