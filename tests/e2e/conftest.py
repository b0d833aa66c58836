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

from engine_api.servers import Subprocess, free_port, tail, wait_until_healthy
from specialist.processes import macaron_command
from macaron.auth import hash_api_key

API_KEY = "mk-e2e-test-key"
STARTUP_TIMEOUT_S = 300.0
ARTIFACT_DIRS = pytest.StashKey[list]()
"""Folders where tests left artifacts (the browser tests' screenshots), printed at the end of the run."""


STACK = pytest.StashKey["Stack"]()
"""The session's running stack, once started (read by the report hook below)."""


STACK_DEATH = pytest.StashKey[str]()
"""Why the session's stack exited mid-run: printed once, at the end of the run."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """The first test that fails on a stack that has exited says why: its exit code and log tail.

    Without this, every later test fails with "connection refused" and the cause stays hidden.
    The same text is printed again at the end of the run, where CI logs are read.
    """
    outcome = yield
    report = outcome.get_result()
    running = item.config.stash.get(STACK, None)
    if (not report.failed or running is None or running.process.proc.poll() is None
            or STACK_DEATH in item.config.stash):
        return
    why = f"exit code {running.process.proc.returncode}; last lines of {running.log}:\n{tail(running.log, 80)}"
    item.config.stash[STACK_DEATH] = why
    report.sections.append(("macaron serve exited", why))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    if STACK_DEATH in config.stash:
        terminalreporter.write_sep("=", "the e2e stack (macaron serve) exited during the run")
        terminalreporter.write_line(config.stash[STACK_DEATH])
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
def stack(macaron_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Stack]:
    running = start_stack(tmp_path_factory.mktemp("stack"), macaron_cache_dir)
    request.config.stash[STACK] = running
    try:
        yield running
    finally:
        running.process.stop()
