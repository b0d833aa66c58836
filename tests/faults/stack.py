"""The stack the fault tests (and loadtest/bench_faults.py) break: every part its own process on loopback, so each can be killed.

Two engine replicas; two specialist processes (replica A and B of every pool) over both engines;
two routers sharing a Redis of the suite's own (a redis-server on a free port, so it can be
killed and restarted without touching anyone else's); one gateway whose router target lists both
routers. Started once per module, in parallel, then each test breaks one part and repairs it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis
import yaml

from engine_api.servers import Subprocess, free_port, wait_until_healthy
from specialist.helpers import SPECIALIST_NAMES
from specialist.processes import launch_engine, launch_specialists, macaron_command, wait_engine, wait_serving

STARTUP_TIMEOUT_S = 240.0
MAX_STREAMS_PER_REPLICA = 3
"""Small on purpose: the specialists' own back-pressure stays in place behind the front door's."""
GATEWAY_MAX_IN_FLIGHT = 2 * MAX_STREAMS_PER_REPLICA
"""The gateway's admission limit: what one pool's two replicas serve at once, so the excess of an overload is
refused at the front door (at once), never deep in the path after queueing, whatever the route mix."""
ROUTER_MAX_IN_FLIGHT = 2 * MAX_STREAMS_PER_REPLICA
"""Each router's admission limit, for SDK clients that call a router directly (the gateway's calls count too)."""
ENGINE_KV_TOKENS = 8192
"""Each engine's KV-cache budget: ample for a few short sessions, and 0.4 GB instead of 3 GB per SmolLM2 engine."""


def kill(proc: Subprocess) -> None:
    """SIGKILL to the process group (a crash, not a drain), and reap it."""
    if proc.proc.poll() is None:
        os.killpg(proc.proc.pid, signal.SIGKILL)
        proc.proc.wait(10)


class RedisServer:
    """A redis-server of this suite on a free loopback port, without persistence."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.binary = binary
        self.port = free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.starts += 1
        log = open(self.workdir / f"redis{self.starts}.log", "wb")  # noqa: SIM115 - lives as long as the server
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.workdir)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        client = redis.Redis.from_url(self.url, socket_timeout=0.5)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if client.ping():
                    return
            except redis.RedisError:
                time.sleep(0.1)
        raise RuntimeError(f"redis-server on port {self.port} did not answer")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=1)


@dataclass
class FaultStack:
    """Where everything listens, and how to restart what a test killed."""

    workdir: Path
    redis: RedisServer
    model_dir: Path
    adapters: dict[str, Path]
    engines: list[Subprocess]
    engine_urls: list[str]
    specialists: list[Subprocess]
    specialist_configs: list[Path]
    specialist_ports: list[dict[str, int]]
    routers: list[Subprocess]
    router_configs: list[Path]
    router_targets: list[str]
    gateway: Subprocess
    gateway_url: str
    restarts: dict[str, int] = field(default_factory=dict)

    def _log(self, name: str) -> Path:
        self.restarts[name] = self.restarts.get(name, 0) + 1
        return self.workdir / f"{name}.restart{self.restarts[name]}.log"

    def restart_engine(self, i: int, *, wait: bool = True) -> None:
        """A new engine process on the same port (the specialists' static discovery lists that URL)."""
        port = int(self.engine_urls[i].rsplit(":", 1)[1])
        args = ["engine", "--host", "127.0.0.1", "--port", str(port), "--model-path", str(self.model_dir),
                "--log-level", "warning", "--max-total-tokens", str(ENGINE_KV_TOKENS),
                "--lora-paths", *(f"{n}={p}" for n, p in self.adapters.items())]
        self.engines[i] = macaron_command("macaron.engine.cli", args, self._log(f"engine{i}"))
        if wait:
            wait_engine(self.engines[i], self.engine_urls[i])

    def restart_specialists(self, i: int) -> None:
        self.specialists[i] = launch_specialists(self.specialist_configs[i], list(SPECIALIST_NAMES),
                                                 self._log(f"specialists{i}"))
        wait_serving(list(self.specialist_ports[i].values()), self.specialists[i])

    def restart_router(self, i: int) -> None:
        self.routers[i] = macaron_command("macaron.router.cli", ["router"], self._log(f"router{i}"),
                                          config=self.router_configs[i])
        wait_router(self.router_targets[i], self.routers[i])

    def engine_running(self) -> int:
        """Requests running or waiting in both engines now (SGLang's /v1/loads); an engine that does not answer counts 0."""
        total = 0
        for url in self.engine_urls:
            try:
                loads = httpx.get(url + "/v1/loads", timeout=2.0).json()["loads"]
                total += sum(int(entry["num_running_reqs"]) + int(entry["num_waiting_reqs"]) for entry in loads)
            except (httpx.HTTPError, KeyError, ValueError):
                pass
        return total


def wait_router(target: str, proc: Subprocess, timeout: float = STARTUP_TIMEOUT_S) -> None:
    from macaron.sdk import MacaronClient

    deadline = time.monotonic() + timeout
    with MacaronClient(target, max_retries=0) as client:
        while time.monotonic() < deadline:
            if proc.proc.poll() is not None:
                raise RuntimeError(f"router exited with {proc.proc.returncode}:\n{proc.log.read_text(errors='replace')[-3000:]}")
            if client.health(timeout=2.0):
                return
            time.sleep(0.25)
    raise RuntimeError(f"router {target} not serving after {timeout:.0f} s")


def _config(path: Path, body: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def start_fault_stack(workdir: Path, model: Path, adapters: dict[str, Path], *,
                      gateway_max_in_flight: int = GATEWAY_MAX_IN_FLIGHT) -> FaultStack:
    """Starts everything in parallel and returns once the gateway is ready; stops what started on failure.

    `gateway_max_in_flight` is the gateway's admission limit: size it to what the two engines serve
    at once with this model (a slower model, fewer)."""
    store = RedisServer(workdir)
    store.start()
    procs: list[Subprocess] = []
    try:
        engines = [launch_engine(model, adapters, workdir / f"engine{i}.log", ["--max-total-tokens", str(ENGINE_KV_TOKENS)])
                   for i in range(2)]
        procs += [p for p, _ in engines]
        urls = [u for _, u in engines]
        spec_ports = [{name: free_port() for name in SPECIALIST_NAMES} for _ in range(2)]
        router_ports = [free_port() for _ in range(2)]
        gateway_port = free_port()
        common: dict[str, Any] = {
            "redis_url": store.url,
            "classifier": {"escalation": False},
            "specialists": {"discovery": {"mode": "static", "urls": urls}, "tokenizer_path": str(model)},
            "router": {
                "pools": {name: [f"127.0.0.1:{ports[name]}" for ports in spec_ports] for name in SPECIALIST_NAMES},
                "store_retry_s": 0.5, "load_heartbeat_s": 0.5, "metrics": False, "grace_period_s": 1.0,
                "default_timeout_s": 30.0, "admission": {"max_in_flight": ROUTER_MAX_IN_FLIGHT},
            },
        }

        def specialists_section(ports: dict[str, int]) -> dict[str, Any]:
            section: dict[str, Any] = {"discovery": {"mode": "static", "urls": urls}, "tokenizer_path": str(model),
                                       "max_concurrent_streams": MAX_STREAMS_PER_REPLICA, "grace_period_s": 1.0}
            section.update({name: {"port": port} for name, port in ports.items()})
            return section

        spec_configs = [_config(workdir / f"specialists{i}.yaml", {**common, "specialists": specialists_section(p)})
                        for i, p in enumerate(spec_ports)]
        specialists = [launch_specialists(c, list(SPECIALIST_NAMES), workdir / f"specialists{i}.log")
                       for i, c in enumerate(spec_configs)]
        procs += specialists
        router_configs = [
            _config(workdir / f"router{i}.yaml", {**common, "router": {**common["router"], "port": port}})
            for i, port in enumerate(router_ports)
        ]
        routers = [macaron_command("macaron.router.cli", ["router"], workdir / f"router{i}.log", config=c)
                   for i, c in enumerate(router_configs)]
        procs += routers
        targets = [f"127.0.0.1:{p}" for p in router_ports]
        gateway_config = _config(workdir / "gateway.yaml", {**common, "gateway": {
            "port": gateway_port, "router_target": "ipv4:" + ",".join(targets), "router_timeout_s": 30.0,
            "grace_period_s": 1.0, "log_level": "warning", "admission": {"max_in_flight": gateway_max_in_flight}}})
        gateway = macaron_command("macaron.gateway.cli", ["gateway"], workdir / "gateway.log", config=gateway_config)
        procs.append(gateway)
        for proc, url in engines:
            wait_engine(proc, url)
        for proc, ports in zip(specialists, spec_ports):
            wait_serving(list(ports.values()), proc, timeout=STARTUP_TIMEOUT_S)
        for proc, target in zip(routers, targets):
            wait_router(target, proc)
        gateway_url = f"http://127.0.0.1:{gateway_port}"
        wait_until_healthy(gateway_url, proc=gateway.proc, log=gateway.log, path="/readyz", timeout=STARTUP_TIMEOUT_S)
        stack = FaultStack(workdir, store, model, adapters, [p for p, _ in engines], urls, specialists, spec_configs,
                           spec_ports, routers, router_configs, targets, gateway, gateway_url)
        return stack
    except BaseException:
        for proc in reversed(procs):
            proc.stop()
        store.kill()
        raise


def stop_fault_stack(stack: FaultStack) -> None:
    """SIGTERM to every part (gateway first), then Redis."""
    for proc in [stack.gateway, *stack.routers, *stack.specialists, *stack.engines]:
        proc.stop()
    stack.redis.kill()


def rss_mb(pids: list[int]) -> float:
    """Summed resident memory of these processes, in MiB (gone ones count 0)."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def stack_pids(stack: FaultStack) -> list[int]:
    """Process ids of every live part (for memory sampling)."""
    procs = [stack.gateway, *stack.routers, *stack.specialists, *stack.engines]
    pids = [p.proc.pid for p in procs if p.proc.poll() is None]
    if stack.redis.proc is not None and stack.redis.proc.poll() is None:
        pids.append(stack.redis.proc.pid)
    return pids
