"""The real stack for end-to-end tests: `macaron serve` as a subprocess, once per session.

Every component gets a free loopback port through a YAML config (so the tests know the engine's
and the router's addresses too) and one API key is configured (so 401s can be tested). The
store is Redis when $REDIS_URL is set (scripts/test sets it), else the in-process one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from engine_api.servers import Subprocess, free_port, wait_until_healthy
from specialist.processes import macaron_command
from macaron.auth import hash_api_key

API_KEY = "mk-e2e-test-key"
STARTUP_TIMEOUT_S = 300.0
ARTIFACT_DIRS = pytest.StashKey[list]()
"""Folders where tests left artifacts (the browser tests' screenshots), printed at the end of the run."""


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    for folder in config.stash.get(ARTIFACT_DIRS, []):
        terminalreporter.write_line(f"test artifacts (screenshots): {folder}")


@dataclass
class Stack:
    """A running `macaron serve` and where its parts listen."""

    process: Subprocess
    gateway_url: str
    router_target: str
    engine_url: str
    log: Path

    @property
    def api_url(self) -> str:
        return self.gateway_url + "/v1"


def stack_config(path: Path, cache_dir: Path, ports: dict[str, int]) -> Path:
    config = {
        "assets": {"cache_dir": str(cache_dir)},
        "engine": {"port": ports["engine"], "log_level": "warning", "max_running_requests": 8},
        "specialists": {name: {"port": ports[name]} for name in ("chat", "agent", "code", "ui")},
        "router": {"port": ports["router"]},
        "gateway": {"port": ports["gateway"], "grace_period_s": 5},
        "auth": {"api_keys": [{"name": "e2e", "sha256": hash_api_key(API_KEY)}]},
        "serve": {"progress": False},
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def start_stack(workdir: Path, cache_dir: Path) -> Stack:
    """`macaron --config FILE serve` (only the serve subcommand registered: see specialist/processes.py)."""
    names = ("engine", "router", "gateway", "chat", "agent", "code", "ui")
    ports = {name: free_port() for name in names}
    config = stack_config(workdir / "macaron.yaml", cache_dir, ports)
    log = workdir / "serve.log"
    process = macaron_command("macaron.serve_cli", ["serve"], log, config=config)
    stack = Stack(process, f"http://127.0.0.1:{ports['gateway']}", f"127.0.0.1:{ports['router']}",
                  f"http://127.0.0.1:{ports['engine']}", log)
    try:
        wait_until_healthy(stack.gateway_url, proc=process.proc, log=log, path="/readyz", timeout=STARTUP_TIMEOUT_S)
    except BaseException:
        process.stop()
        raise
    return stack


@pytest.fixture(scope="session")
def stack(macaron_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = start_stack(tmp_path_factory.mktemp("stack"), macaron_cache_dir)
    try:
        yield running
    finally:
        running.process.stop()
