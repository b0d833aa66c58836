"""Starting `macaron` subcommands (engine, specialist) as subprocesses on loopback for these tests.

Each command is run through its own module's `add_parser`, so these tests depend only on the
engine's and the specialist's CLI modules, not on every component the dispatcher lists.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engine_api.servers import Subprocess, free_port, wait_until_healthy

STARTUP_TIMEOUT_S = 90.0
SPECIALIST_SERVICE = "macaron.v1.Specialist"

_BOOT = (
    "import argparse, importlib, logging, sys\n"
    "module = importlib.import_module(sys.argv[1])\n"
    "parser = argparse.ArgumentParser(); parser.add_argument('--config')\n"
    "module.add_parser(parser.add_subparsers())\n"
    "args = parser.parse_args(sys.argv[2:])\n"
    "logging.basicConfig(level=logging.INFO, format='%(asctime)s %(levelname)s %(name)s: %(message)s')\n"
    "sys.exit(args.func(args))\n"
)


def macaron_command(module: str, args: list[str], log: Path, config: Path | None = None) -> Subprocess:
    """`macaron [--config FILE] ARGS` with only `module`'s subcommand registered."""
    argv = [sys.executable, "-c", _BOOT, module, *(["--config", str(config)] if config else []), *args]
    return Subprocess(argv, log)


def launch_engine(model_dir: Path, adapters: dict[str, Path], log: Path, extra: list[str] = ()) -> tuple[Subprocess, str]:
    """`macaron engine` with the tiny model and its adapters on a free port (not waited for)."""
    port = free_port()
    args = ["engine", "--host", "127.0.0.1", "--port", str(port), "--model-path", str(model_dir),
            "--log-level", "warning", "--lora-paths", *(f"{n}={p}" for n, p in adapters.items()), *extra]
    return macaron_command("macaron.engine.cli", args, log), f"http://127.0.0.1:{port}"


def wait_engine(proc: Subprocess, url: str) -> None:
    """Waits until the engine answers /health; stops it if it never does."""
    try:
        wait_until_healthy(url, proc=proc.proc, log=proc.log)
    except BaseException:
        proc.stop()
        raise


def start_engine(model_dir: Path, adapters: dict[str, Path], log: Path, extra: list[str] = ()) -> tuple[Subprocess, str]:
    """`macaron engine` on a free port, once it is healthy."""
    proc, url = launch_engine(model_dir, adapters, log, extra)
    wait_engine(proc, url)
    return proc, url


def health_status(port: int, timeout: float = 2.0) -> int:
    """The Health.Check status of the Specialist service on `port` (raises grpc.RpcError)."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return stub.Check(health_pb2.HealthCheckRequest(service=SPECIALIST_SERVICE), timeout=timeout).status


def wait_serving(ports: list[int], proc: Subprocess, timeout: float = STARTUP_TIMEOUT_S) -> None:
    """Polls gRPC health until every port answers SERVING; fails early if the process exits."""
    deadline = time.monotonic() + timeout
    pending = list(ports)
    while pending and time.monotonic() < deadline:
        if proc.proc.poll() is not None:
            raise RuntimeError(f"specialist exited with {proc.proc.returncode}:\n{proc.log.read_text(errors='replace')[-3000:]}")
        try:
            if health_status(pending[0]) == health_pb2.HealthCheckResponse.SERVING:
                pending.pop(0)
                continue
        except grpc.RpcError:
            pass
        time.sleep(0.2)
    if pending:
        raise RuntimeError(f"specialist ports {pending} not serving after {timeout:.0f} s")


def launch_specialists(config: Path, names: list[str], log: Path) -> Subprocess:
    """`macaron --config FILE specialist --name N ...` (not waited for)."""
    args = ["specialist", *(a for n in names for a in ("--name", n))]
    return macaron_command("macaron.specialist.cli", args, log, config=config)


def start_specialists(config: Path, names: list[str], ports: list[int], log: Path) -> Subprocess:
    """Specialists once every port serves."""
    proc = launch_specialists(config, names, log)
    try:
        wait_serving(ports, proc)
    except BaseException:
        proc.stop()
        raise
    return proc


__all__ = ["Subprocess", "free_port", "health_status", "launch_engine", "launch_specialists", "macaron_command",
           "start_engine", "start_specialists", "wait_engine", "wait_serving"]
