"""Fixtures of the specialist tests: one embedded engine and the four specialists, per session.

Both run as subprocesses on loopback (`macaron engine`, `macaron --config FILE specialist
--name ...`). All four profiles get the same system prompt here so that, for one prompt,
their outputs can differ only through their adapters.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from .helpers import SPECIALIST_NAMES, stub
from .processes import Subprocess, free_port, launch_engine, launch_specialists, wait_engine, wait_serving

SYSTEM_PROMPT = "You are a helpful assistant."


def write_config(path: Path, *, engine_urls: list[str], model_dir: Path, ports: dict[str, int], **top: Any) -> Path:
    """A YAML config with these specialists' ports, the engine URLs and extra `specialists:` keys."""
    spec: dict[str, Any] = {
        "discovery": {"mode": "static", "urls": engine_urls},
        "tokenizer_path": str(model_dir),
        **top,
    }
    for name, port in ports.items():
        spec[name] = {"port": port, "metrics_port": free_port(), "system_prompt": SYSTEM_PROMPT}
    path.write_text(yaml.safe_dump({"specialists": spec}))
    return path


@dataclass
class Stack:
    """The session's processes: the engine and its four specialists, plus a lone `chat`
    specialist over two replicas (a victim engine that test_lifecycle kills, and the engine)."""

    engine_url: str
    ports: dict[str, int]
    lone_port: int
    victim_url: str
    victim: Subprocess
    lone: Subprocess
    config: Path


@pytest.fixture(scope="session")
def stack(tiny_model, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Every process started side by side (specialists reach their engines lazily), then awaited."""
    workdir = tmp_path_factory.mktemp("stack")
    model, adapters = tiny_model.model_dir, dict(tiny_model.adapters)
    ports = {name: free_port() for name in SPECIALIST_NAMES}
    lone_port = free_port()
    procs: list[Subprocess] = []
    try:
        engine, url = launch_engine(model, adapters, workdir / "engine.log")
        procs.append(engine)
        victim, victim_url = launch_engine(model, adapters, workdir / "victim.log")
        procs.append(victim)
        config = write_config(workdir / "macaron.yaml", engine_urls=[url], model_dir=model, ports=ports)
        procs.append(launch_specialists(config, list(SPECIALIST_NAMES), workdir / "specialists.log"))
        lone_config = write_config(
            workdir / "lone.yaml", engine_urls=[victim_url, url], model_dir=model, ports={"chat": lone_port},
            max_concurrent_streams=1, grace_period_s=20.0, retry_after_ms=750,
        )
        lone = launch_specialists(lone_config, ["chat"], workdir / "lone.log")
        procs.append(lone)
        wait_engine(engine, url)
        wait_engine(victim, victim_url)
        wait_serving(list(ports.values()), procs[2])
        wait_serving([lone_port], lone)
        yield Stack(url, ports, lone_port, victim_url, victim, lone, config)
    finally:
        for proc in reversed(procs):
            proc.stop()


@pytest.fixture(scope="session")
def engine_url(stack: Stack) -> str:
    return stack.engine_url


@pytest.fixture(scope="session")
def specialist_ports(stack: Stack) -> dict[str, int]:
    return stack.ports


@pytest.fixture(scope="session")
def stubs(specialist_ports: dict[str, int]):
    return {name: stub(port) for name, port in specialist_ports.items()}
