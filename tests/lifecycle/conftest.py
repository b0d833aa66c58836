"""The real stack for version tests: two embedded engines with `code@v1`, the four specialists, routers in-process.

Engines start with the tiny model's adapters, the code adapter served as `code@v1` (the code
specialist is configured with adapter_version v1). New versions are the tiny code adapter with
its B matrices scaled (`macaron.lifecycle.derive.scaled_adapter`), so they are real, distinct
adapters loaded through `/load_lora_adapter`. Each test gets its own Redis key prefix.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from macaron.config import MacaronSettings, load_settings
from macaron.lifecycle.derive import scaled_adapter
from macaron.router.server import RouterServer
from macaron.store import RedisStore
from macaron.v1 import admin_pb2_grpc, router_pb2_grpc
from specialist.helpers import SPECIALIST_NAMES
from specialist.processes import Subprocess, free_port, launch_engine, launch_specialists, wait_engine, wait_serving

SYSTEM_PROMPT = "You are a helpful assistant."


class KeywordClassifier:
    """"python"/"code" → code at 0.95, anything else → chat at 0.9: every decision is known in advance."""

    def classify(self, text: str | None = None, *, messages: Any = None, tools: Any = None) -> dict[str, Any]:
        if text is None:
            text = next((m["content"] for m in reversed(messages or []) if m["role"] == "user"), "")
        name = "code" if ("python" in text.lower() or "code" in text.lower()) else "chat"
        probs = {n: (0.95 if n == name else 0.05 / 3) for n in SPECIALIST_NAMES}
        return {"specialist": name, "probabilities": probs, "confidence": 0.95}


@dataclass
class VersionStack:
    engine_urls: list[str]
    config: Path
    adapters: dict[str, Path]
    """Extra code versions on disk: v2 (B x 0.5), v3 (B x 2), bad (B x -4)."""


def write_config(path: Path, *, engine_urls: list[str], model_dir: Path, ports: dict[str, int]) -> Path:
    specialists: dict[str, Any] = {"discovery": {"mode": "static", "urls": engine_urls}, "tokenizer_path": str(model_dir)}
    for name, port in ports.items():
        specialists[name] = {"port": port, "system_prompt": SYSTEM_PROMPT}
    specialists["code"]["adapter_version"] = "v1"
    router = {
        "pools": {name: [f"127.0.0.1:{port}"] for name, port in ports.items()},
        "store_retry_s": 0.2,
        "load_heartbeat_s": 0.5,
        "metrics": False,
        "lifecycle": {"inventory_refresh_s": 0.5, "usage_heartbeat_s": 0.3, "unload_idle_s": 1.0,
                      "unload_timeout_s": 60.0, "auto_rollback": {"enabled": False}},
    }
    path.write_text(yaml.safe_dump({"specialists": specialists, "router": router}))
    return path


@pytest.fixture(scope="package")  # stopped once this package's tests are done: it frees the machine
def version_stack(tiny_model, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VersionStack]:
    workdir = tmp_path_factory.mktemp("lifecycle-stack")
    model, base_adapters = tiny_model.model_dir, dict(tiny_model.adapters)
    served = {("code@v1" if n == "code" else n): p for n, p in base_adapters.items()}
    extra = {v: scaled_adapter(base_adapters["code"], workdir / f"code-{v}", s)
             for v, s in (("v2", 0.5), ("v3", 2.0), ("bad", -4.0), ("same", 1.0))}
    ports = {name: free_port() for name in SPECIALIST_NAMES}
    procs: list[Subprocess] = []
    try:
        engines = [launch_engine(model, served, workdir / f"engine{i}.log") for i in range(2)]
        procs += [proc for proc, _ in engines]
        urls = [url for _, url in engines]
        config = write_config(workdir / "macaron.yaml", engine_urls=urls, model_dir=model, ports=ports)
        specialists = launch_specialists(config, list(SPECIALIST_NAMES), workdir / "specialists.log")
        procs.append(specialists)
        for proc, url in engines:
            wait_engine(proc, url)
        wait_serving(list(ports.values()), specialists)
        yield VersionStack(urls, config, extra)
    finally:
        for proc in reversed(procs):
            proc.stop()


@pytest.fixture
def settings(version_stack: VersionStack) -> MacaronSettings:
    return load_settings(version_stack.config)


class Routers:
    """Router replicas in the test's loop sharing one Redis prefix; each with a Router and an admin stub."""

    def __init__(self, settings: MacaronSettings, tokenizer: Any, redis_url: str) -> None:
        self.settings = settings
        self.tokenizer = tokenizer
        self.redis_url = redis_url
        self.key_prefix = f"test-lifecycle-{uuid.uuid4().hex[:8]}:"
        self.servers: list[RouterServer] = []
        self.channels: list[grpc.aio.Channel] = []

    async def start(self, *, settings: MacaronSettings | None = None, **kwargs: Any
                    ) -> tuple[RouterServer, router_pb2_grpc.RouterStub, admin_pb2_grpc.AdapterAdminStub]:
        # generous: the test machine is shared; a Redis timeout degrades routing (no session pinning)
        store = RedisStore(self.redis_url, timeout_s=2.0, key_prefix=self.key_prefix,
                           client_name=self.client_name(len(self.servers)))
        server = RouterServer(settings or self.settings, store=store, classifier=KeywordClassifier(),
                              tokenizer=self.tokenizer, port=0, serve_metrics=False, **kwargs)
        port = await server.start()
        self.servers.append(server)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        self.channels.append(channel)
        return server, router_pb2_grpc.RouterStub(channel), admin_pb2_grpc.AdapterAdminStub(channel)

    def client_name(self, index: int) -> str:
        """The Redis client name of the index-th router's connections (CLIENT LIST shows it)."""
        return f"{self.key_prefix}router{index}"

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close()
        for server in self.servers:
            with contextlib.suppress(Exception):
                await server.aclose()


@pytest.fixture
async def routers(settings: MacaronSettings, tokenizer, redis_url: str, engines_as_started: None) -> AsyncIterator[Routers]:
    r = Routers(settings, tokenizer, redis_url)
    try:
        yield r
    finally:
        await r.close()


def _adapters(url: str) -> dict[str, str]:
    import httpx

    cards = httpx.get(f"{url}/v1/models", timeout=10).json()["data"]
    return {c["id"]: c["root"] for c in cards if c.get("parent")}


@pytest.fixture
def engines_as_started(version_stack: VersionStack) -> Iterator[None]:
    """After each test, the engines hold exactly the adapters they started with (tests load and unload)."""
    import httpx

    initial = {url: _adapters(url) for url in version_stack.engine_urls}
    yield
    for url, wanted in initial.items():
        now = _adapters(url)
        for name in set(now) - set(wanted):
            httpx.post(f"{url}/unload_lora_adapter", json={"lora_name": name}, timeout=30)
        for name in set(wanted) - set(now):
            httpx.post(f"{url}/load_lora_adapter", json={"lora_name": name, "lora_path": wanted[name]}, timeout=30)
