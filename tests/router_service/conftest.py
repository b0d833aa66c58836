"""Fixtures of the router tests: two real embedded engines, the four specialists over both, routers in-process.

The engines and the specialists run as subprocesses on loopback (once per session, through the
specialist tests' helpers); each test starts its own router replicas in its event loop
(`RouterServer` on port 0) against the machine's Redis with a key prefix of its own, so tests
never see each other's sessions or affinity. The classifier is a keyword stand-in with fixed
probabilities, so every decision in these tests is known in advance.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from dataclasses import dataclass
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from macaron.config import MacaronSettings, load_settings
from macaron.router.server import RouterServer
from macaron.store import RedisStore
from macaron.v1 import router_pb2_grpc
from specialist.helpers import SPECIALIST_NAMES
from specialist.processes import Subprocess, free_port, launch_engine, launch_specialists, wait_engine, wait_serving

SYSTEM_PROMPT = "You are a helpful assistant."

RULES: list[tuple[str, str, float]] = [
    (r"\bpython\b|\bfunction\b|\bcode\b", "code", 0.95),
    (r"\bweather\b|\bemail\b", "agent", 0.9),
    (r"\bbutton\b|\bscreen\b", "ui", 0.9),
    (r"\bhello\b|\bhow are you\b", "chat", 0.9),
    (r"\bthanks\b", "chat", 0.6),
]


class KeywordClassifier:
    """First matching rule wins; the rest of the probability is shared evenly. No rule: chat at 0.3 (unsure)."""

    def __init__(self) -> None:
        self.calls = 0

    def classify(self, text: str | None = None, *, messages: Any = None, tools: Any = None) -> dict[str, Any]:
        self.calls += 1
        if text is None:
            text = next((m["content"] for m in reversed(messages or []) if m["role"] in ("user", "tool")), "")
        for pattern, name, p in RULES:
            if re.search(pattern, text.lower()):
                break
        else:
            name, p = "chat", 0.3
        probs = {n: (p if n == name else (1 - p) / 3) for n in SPECIALIST_NAMES}
        return {"specialist": name, "probabilities": probs, "confidence": p}


def write_config(path: Path, *, engine_urls: list[str], model_dir: Path, ports: dict[str, int]) -> Path:
    """Specialists over `engine_urls` on `ports` (one system prompt for all), and a router section for them."""
    specialists: dict[str, Any] = {"discovery": {"mode": "static", "urls": engine_urls}, "tokenizer_path": str(model_dir)}
    for name, port in ports.items():
        specialists[name] = {"port": port, "system_prompt": SYSTEM_PROMPT}
    router = {
        "pools": {name: [f"127.0.0.1:{port}"] for name, port in ports.items()},
        "judge_threshold": 0.5,  # off by default; these tests exercise the judge
        "judge_timeout_s": 10.0,
        "store_retry_s": 0.2,
        "load_heartbeat_s": 0.5,
        "metrics": False,
    }
    path.write_text(yaml.safe_dump({"specialists": specialists, "router": router}))
    return path


@dataclass
class Stack:
    engine_urls: list[str]
    ports: dict[str, int]
    config: Path


@pytest.fixture(scope="session")
def stack(tiny_model, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Two engine replicas and the four specialists over both (one process), started side by side."""
    workdir = tmp_path_factory.mktemp("router-stack")
    model, adapters = tiny_model.model_dir, dict(tiny_model.adapters)
    ports = {name: free_port() for name in SPECIALIST_NAMES}
    procs: list[Subprocess] = []
    try:
        engines = [launch_engine(model, adapters, workdir / f"engine{i}.log") for i in range(2)]
        procs += [proc for proc, _ in engines]
        urls = [url for _, url in engines]
        config = write_config(workdir / "macaron.yaml", engine_urls=urls, model_dir=model, ports=ports)
        specialists = launch_specialists(config, list(SPECIALIST_NAMES), workdir / "specialists.log")
        procs.append(specialists)
        for proc, url in engines:
            wait_engine(proc, url)
        wait_serving(list(ports.values()), specialists)
        yield Stack(urls, ports, config)
    finally:
        for proc in reversed(procs):
            proc.stop()


@pytest.fixture(scope="session")
def engine_urls(stack: Stack) -> list[str]:
    return stack.engine_urls


@pytest.fixture
def settings(stack: Stack) -> MacaronSettings:
    return load_settings(stack.config)


@pytest.fixture
def key_prefix() -> str:
    return f"test-router-{uuid.uuid4().hex[:8]}:"


class Routers:
    """Starts router replicas in the test's loop and closes them (and their channels) at the end."""

    def __init__(self, settings: MacaronSettings, tokenizer: Any, redis_url: str, key_prefix: str) -> None:
        self.settings = settings
        self.tokenizer = tokenizer
        self.redis_url = redis_url
        self.key_prefix = key_prefix
        self.servers: list[RouterServer] = []
        self.channels: list[grpc.aio.Channel] = []

    async def start(self, *, settings: MacaronSettings | None = None, redis_url: str | None = None,
                    classifier: Any = None, **kwargs: Any) -> tuple[RouterServer, router_pb2_grpc.RouterStub]:
        store = RedisStore(redis_url or self.redis_url, timeout_s=0.25, key_prefix=self.key_prefix)
        if "cache_store" not in kwargs:  # placement state on the same server (as with cache_redis_url unset)
            kwargs["cache_store"] = RedisStore(redis_url or self.redis_url, timeout_s=0.25, key_prefix=self.key_prefix)
        server = RouterServer(settings or self.settings, store=store,
                              classifier=classifier if classifier is not None else KeywordClassifier(),
                              tokenizer=kwargs.pop("tokenizer", self.tokenizer), port=0, serve_metrics=False, **kwargs)
        port = await server.start()
        self.servers.append(server)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        self.channels.append(channel)
        return server, router_pb2_grpc.RouterStub(channel)

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close()
        for server in self.servers:
            with contextlib.suppress(Exception):
                await server.aclose()


@pytest.fixture
async def routers(settings: MacaronSettings, tokenizer, redis_url: str, key_prefix: str) -> AsyncIterator[Routers]:
    r = Routers(settings, tokenizer, redis_url, key_prefix)
    try:
        yield r
    finally:
        await r.close()

