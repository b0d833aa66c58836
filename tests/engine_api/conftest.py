"""Fixtures of the engine API tests: real engines on loopback, started once per session.

- `engine`: the server the contract suite talks to. `$MACARON_ENGINE_URL` points it at any
  base-group server (a real SGLang included); otherwise `macaron engine` is started as a
  subprocess (through the CLI, a YAML config file and flags) with the tiny model and its
  four adapters.
- `small_engine`: an embedded engine in this process (create_app on uvicorn in a thread)
  with one running and one queued request at most and incremental streaming, for the
  overload and incremental-mode tests and as smg's second replica.

For an external server, `$MACARON_ENGINE_ADAPTERS` names its adapters (default
chat,agent,code,ui) and `$MACARON_ENGINE_LOADABLE_ADAPTER` is an adapter directory that
server can read (the run-time load test is skipped without it).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from engine_api.servers import Subprocess, ThreadedServer, start_cli_engine
from macaron.engine_client import AsyncEngineClient

ENGINE_URL_ENV = "MACARON_ENGINE_URL"
ADAPTERS_ENV = "MACARON_ENGINE_ADAPTERS"
LOADABLE_ADAPTER_ENV = "MACARON_ENGINE_LOADABLE_ADAPTER"
ADAPTER_NAMES = ("chat", "agent", "code", "ui")


@dataclass
class EngineTarget:
    """A running base-group server and what the tests may assume about it."""

    url: str
    adapters: list[str]
    loadable_adapter: Path | None
    """An adapter directory the server can load at run time (a copy is made per test)."""
    embedded: bool
    """Our engine: memory accounting, 400 before streaming, the tiny model's context length."""
    process: Subprocess | None = None


def lora_flags(assets) -> list[str]:
    return ["--model-path", str(assets.model_dir), "--lora-paths",
            *(f"{name}={path}" for name, path in assets.adapters.items())]


@pytest.fixture(scope="session")
def engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineTarget]:
    url = os.environ.get(ENGINE_URL_ENV)
    if url:
        names = [n for n in os.environ.get(ADAPTERS_ENV, ",".join(ADAPTER_NAMES)).split(",") if n]
        loadable = os.environ.get(LOADABLE_ADAPTER_ENV)
        info = httpx.get(url.rstrip("/") + "/server_info", timeout=10.0).json()
        yield EngineTarget(url.rstrip("/"), names, Path(loadable) if loadable else None,
                           embedded=info.get("frontend") == "macaron-embedded")
        return
    assets = request.getfixturevalue("tiny_model")
    workdir = tmp_path_factory.mktemp("engine")
    config = workdir / "macaron.yaml"
    config.write_text("engine:\n  max_running_requests: 8\n  log_level: warning\n")
    server, url = start_cli_engine(lora_flags(assets), workdir / "engine.log", config=config)
    try:
        yield EngineTarget(url, list(ADAPTER_NAMES), Path(assets.adapters["code"]), embedded=True, process=server)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def small_engine(tiny_model) -> Iterator[ThreadedServer]:
    from macaron.engine.args import EngineArgs
    from macaron.engine.async_engine import AsyncLLMEngine
    from macaron.engine.http_server import create_app

    args = EngineArgs(
        model_path=str(tiny_model.model_dir),
        lora_paths=[f"{name}={path}" for name, path in tiny_model.adapters.items()],
        max_running_requests=1,
        max_queued_requests=1,
        incremental_streaming_output=True,
        log_level="warning",
    )
    server = ThreadedServer(create_app(AsyncLLMEngine.from_args(args), args)).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def client(engine: EngineTarget) -> AsyncIterator[AsyncEngineClient]:
    async with AsyncEngineClient(engine.url, timeout=30.0) as c:
        yield c


@pytest.fixture
def adapter_copy(engine: EngineTarget, tmp_path: Path) -> Path:
    """A copy of a loadable adapter directory, to load under a new name."""
    if engine.loadable_adapter is None:
        pytest.skip(f"set {LOADABLE_ADAPTER_ENV} to an adapter directory the server can read")
    if not engine.embedded:
        return engine.loadable_adapter  # the server's file system, not ours
    target = tmp_path / "code-v2"
    shutil.copytree(engine.loadable_adapter, target)
    return target
