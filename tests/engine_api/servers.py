"""Starting and stopping engine servers (and smg) on loopback for the engine API tests.

Everything binds 127.0.0.1, every HTTP call has a timeout, and every process is started in
its own session so teardown can end it and its children without touching anything else.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

STARTUP_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 15.0


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


_HANDED_OUT: set[int] = set()
"""Ports free_port gave out in this process: a stack picks all its ports before its servers bind."""


def free_port() -> int:
    """A TCP port nobody listens on right now (on 127.0.0.1), below the ephemeral range: a server started on it
    binds seconds later (after loading its model), and a port the kernel hands out for port 0 can meanwhile
    become the source port of any outgoing connection (Redis, HTTP clients), which failed a whole stack with
    "address already in use". A random pick below that range is only taken by another listener."""
    low, _ = _ephemeral_range()
    rng = random.SystemRandom()
    for _ in range(50):
        port = rng.randrange(20000, low) if low > 21000 else 0
        if port in _HANDED_OUT:  # free now, but promised to a server of this run that may not have bound yet
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            bound = sock.getsockname()[1]
            _HANDED_OUT.add(bound)
            return bound
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        bound = sock.getsockname()[1]
        _HANDED_OUT.add(bound)
        return bound


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def wait_until_healthy(url: str, *, proc: subprocess.Popen[bytes] | None = None, log: Path | None = None,
                       path: str = "/health", timeout: float = STARTUP_TIMEOUT_S) -> None:
    """Polls `url + path` until it answers 200; fails early if `proc` exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{url} exited with {proc.returncode} before it was healthy:\n{tail(log) if log else ''}")
        try:
            if httpx.get(url + path, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"{url} not healthy after {timeout:.0f} s:\n{tail(log) if log else ''}")


class Subprocess:
    """A server process with its log file; stop() sends SIGTERM, then SIGKILL after a grace period."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str] | None = None):
        self.argv = argv
        self.log = log
        self._log_file = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            argv, stdout=self._log_file, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, **(env or {})},
        )

    def stop(self) -> int | None:
        """Ends the process group; returns the exit code (None if it had to be killed)."""
        code: int | None = None
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                code = self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        else:
            code = self.proc.returncode
        self._log_file.close()
        return code


def start_cli_engine(args: list[str], log: Path, config: Path | None = None) -> tuple[Subprocess, str]:
    """`macaron [--config FILE] engine ARGS` on a free port; returns the process and its URL."""
    port = free_port()
    argv = [sys.executable, "-m", "macaron.cli"]
    if config is not None:
        argv += ["--config", str(config)]
    argv += ["engine", "--host", "127.0.0.1", "--port", str(port), *args]
    server = Subprocess(argv, log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(url, proc=server.proc, log=log)
    except BaseException:
        server.stop()
        raise
    return server, url


class ThreadedServer:
    """An ASGI app on uvicorn in a background thread of this process (lifespan included)."""

    def __init__(self, app: Any):
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name=f"uvicorn-{self.port}", daemon=True)

    def start(self, health_path: str = "/health") -> ThreadedServer:
        self._thread.start()
        wait_until_healthy(self.url, path=health_path)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(STOP_TIMEOUT_S)
