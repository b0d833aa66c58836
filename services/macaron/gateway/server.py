"""The gateway on uvicorn: `build_server(settings)`, with drain-on-signal.

On SIGTERM/SIGINT (or `begin_drain()` from a supervisor that owns the signals) the gateway is
marked draining (new chat requests: 503, /readyz: 503), uvicorn stops accepting connections,
in-flight requests and streams get `gateway.grace_period_s` to finish, then are cancelled
(which cancels their router calls down to the engine).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

import uvicorn
from fastapi import FastAPI

from macaron.config import MacaronSettings


class GatewayServer(uvicorn.Server):
    """uvicorn.Server that flips the gateway to draining as soon as it is asked to exit."""

    def __init__(self, config: uvicorn.Config, app: FastAPI, *, install_signal_handlers: bool = True) -> None:
        super().__init__(config)
        self.app = app
        self._install_signal_handlers = install_signal_handlers

    def handle_exit(self, sig: int, frame: Any) -> None:
        self.app.state.gateway.draining = True
        super().handle_exit(sig, frame)

    def begin_drain(self) -> None:
        """What a stop signal does, for a supervisor that handles the signals itself."""
        self.app.state.gateway.draining = True
        self.should_exit = True

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """SIGINT/SIGTERM drain the gateway; unlike uvicorn's, the signal is not raised again afterwards,
        so a drained gateway exits 0."""
        if not self._install_signal_handlers or threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def build_server(settings: MacaronSettings, *, install_signal_handlers: bool = True, **app_kwargs: Any) -> GatewayServer:
    """The gateway app on a uvicorn server bound to gateway.host:gateway.port (InsecureBindError without keys)."""
    from macaron import telemetry

    telemetry.setup_tracing_from(settings.telemetry, "macaron-gateway")
    from macaron.gateway.app import create_app

    app = create_app(settings, **app_kwargs)
    gs = settings.gateway
    config = uvicorn.Config(
        app,
        host=gs.host,
        port=gs.port,
        log_level=gs.log_level,
        timeout_graceful_shutdown=max(int(round(gs.grace_period_s)), 1),
        lifespan="on",
        log_config=None,
    )
    return GatewayServer(config, app, install_signal_handlers=install_signal_handlers)
