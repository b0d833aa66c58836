"""SGLang's own router (smg) in front of two engine replicas: discovery and forwarded /generate.

smg discovers a worker by probing /v1/models, /version, /server_info and /model_info, polls
/v1/loads and /health, and forwards native /generate bodies with extra top-level fields of
its own; the embedded engine must look like an SGLang worker to it.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from engine_api.conftest import EngineTarget, lora_flags
from engine_api.servers import Subprocess, free_port, start_cli_engine
from engine_api.wire import TIMEOUT, decode, metric_sync

GREEDY = {"max_new_tokens": 12, "temperature": 0.0}
SMG = Path(sys.executable).parent / "smg"


@dataclass
class Replica:
    process: Subprocess
    url: str


def _workers(url: str) -> list[dict]:
    try:
        return httpx.get(url + "/workers", timeout=2.0).json().get("workers", [])
    except (httpx.HTTPError, ValueError):
        return []


@pytest.fixture(scope="module")
def second_replica(engine: EngineTarget, request: pytest.FixtureRequest, tmp_path_factory) -> Iterator[Replica | None]:
    """A second replica identical to the contract engine, started through the CLI (when the suite started it)."""
    if engine.process is None:
        yield None
        return
    assets = request.getfixturevalue("tiny_model")
    server, url = start_cli_engine([*lora_flags(assets), "--log-level", "warning"],
                                   tmp_path_factory.mktemp("replica") / "engine.log")
    try:
        yield Replica(server, url)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def replicas(engine: EngineTarget, second_replica: Replica | None) -> list[str]:
    return [engine.url] + ([second_replica.url] if second_replica else [])


@pytest.fixture(scope="module")
def smg(replicas: list[str], tmp_path_factory) -> Iterator[str]:
    if not SMG.exists():
        pytest.skip("smg is not installed (pip install smg)")
    port = free_port()
    router = Subprocess(
        [str(SMG), "launch", "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *replicas,
         "--policy", "cache_aware", "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()),
         "--log-level", "warn", "--worker-startup-check-interval", "1", "--shutdown-grace-period-secs", "1"],
        tmp_path_factory.mktemp("smg") / "smg.log",
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while len([w for w in _workers(url) if w.get("is_healthy")]) < len(replicas):
            if router.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"smg did not register {replicas}:\n{router.log.read_text()[-3000:]}")
            time.sleep(0.25)
        yield url
    finally:
        router.stop()


def test_smg_discovers_the_engines_as_sglang_workers(smg: str, replicas: list[str], engine: EngineTarget) -> None:
    workers = _workers(smg)
    assert sorted(w["url"] for w in workers) == sorted(replicas)
    served = httpx.get(engine.url + "/model_info", timeout=10.0).json()["served_model_name"]
    for worker in workers:
        assert worker["is_healthy"] and worker["runtime_type"] == "sglang"
        assert worker["model_id"] == served


async def test_generate_through_smg(smg: str, engine: EngineTarget) -> None:
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        for adapter in (None, *engine.adapters[:2]):
            body = {"text": "Hello there", "sampling_params": GREEDY, **({"lora_path": adapter} if adapter else {})}
            routed = await http.post(smg + "/generate", json=body)
            direct = await http.post(engine.url + "/generate", json=body)
            assert routed.status_code == 200, routed.text
            assert routed.json()["output_ids"] == direct.json()["output_ids"]
            assert routed.json()["meta_info"]["finish_reason"]["type"] == "length"

        async with http.stream("POST", smg + "/generate", json={"text": "Hello", "stream": True,
                                                                 "sampling_params": GREEDY}) as response:
            assert response.status_code == 200
            frames = [line[5:].strip() async for line in response.aiter_lines() if line.startswith("data:")]
        chunks, done = decode(frames)
        assert done and chunks[-1]["meta_info"]["completion_tokens"] == 12

        refused = await http.post(smg + "/generate", json={"text": "a", "lora_path": "no-such-adapter"})
        assert refused.status_code == 400


def test_sigterm_drains_running_requests(second_replica: Replica | None) -> None:
    """Runs last in this module: stops the second replica while it streams (smg sees a worker go)."""
    if second_replica is None:
        pytest.skip("needs an embedded replica to stop")
    frames: list[str] = []

    def stream() -> None:
        body = {"text": "x", "stream": True, "sampling_params": {"max_new_tokens": 400, "ignore_eos": True}}
        with httpx.stream("POST", second_replica.url + "/generate", json=body, timeout=30.0) as response:
            frames.extend(line for line in response.iter_lines() if line.startswith("data:"))

    reader = threading.Thread(target=stream)
    reader.start()
    deadline = time.monotonic() + 10
    while metric_sync(second_replica.url, "sglang:num_running_reqs") < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    code = second_replica.process.stop()  # SIGTERM: uvicorn stops accepting, the stream runs to its end
    reader.join(30)
    assert frames and frames[-1] == "data: [DONE]", "the running stream was cut instead of drained"
    assert len(frames) == 401 and code in (0, -15), f"graceful exit expected, got {code}"
