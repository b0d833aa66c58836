"""`macaron router` as a process: serves with metrics, drains in-flight streams on SIGTERM."""

from __future__ import annotations

import os
import signal
import time

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from macaron.ports import metrics_port
from macaron.router.server import SERVICE_NAME
from macaron.v1 import common_pb2 as pb
from macaron.v1 import router_pb2_grpc
from specialist.helpers import user
from specialist.processes import free_port, macaron_command

pytestmark = pytest.mark.slow


def free_port_pair() -> int:
    """A port whose metrics port (+1000) is free too."""
    for _ in range(50):
        port = free_port()
        if port + 1000 < 65536:
            try:
                import socket

                with socket.socket() as s:
                    s.bind(("127.0.0.1", metrics_port(port)))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port pair")


def test_router_process_serves_metrics_and_drains_on_sigterm(stack, tmp_path) -> None:
    port = free_port_pair()
    proc = macaron_command(
        "macaron.router.cli",
        ["router", "--port", str(port), "--metrics", "--grace-period-s", "20",
         "--router-id", f"proc-{port}"],
        tmp_path / "router.log", config=stack.config,
    )
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        health = health_pb2_grpc.HealthStub(channel)
        deadline = time.monotonic() + 120
        while True:
            assert proc.proc.poll() is None, proc.log.read_text()[-3000:]
            try:
                if health.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=2).status == 1:
                    break
            except grpc.RpcError:
                pass
            assert time.monotonic() < deadline, "router did not start"
            time.sleep(0.2)
        stub = router_pb2_grpc.RouterStub(channel)
        forced = pb.GenerateRequest(messages=[user("tell me a long story")], specialist=pb.SPECIALIST_KIND_CHAT,
                                    sampling=pb.SamplingParams(max_new_tokens=4, temperature=0.0))
        assert list(stub.Generate(forced, timeout=60))[0].route.reason == pb.ROUTE_REASON_EXPLICIT
        metrics = httpx.get(f"http://127.0.0.1:{metrics_port(port)}/metrics", timeout=10).text
        assert 'macaron_router_decisions_total{reason="explicit",specialist="chat"} 1.0' in metrics
        assert "macaron_router_route_seconds_bucket" in metrics and "macaron_router_store_degraded 0.0" in metrics

        long = pb.GenerateRequest(messages=[user("tell me a long story")], specialist=pb.SPECIALIST_KIND_CHAT,
                                  sampling=pb.SamplingParams(max_new_tokens=48, min_new_tokens=48, temperature=0.0))
        stream = stub.Generate(long, timeout=60)
        first = next(stream)
        os.killpg(proc.proc.pid, signal.SIGTERM)
        rest = list(stream)  # the stream in flight finishes
        assert first.route.specialist == pb.SPECIALIST_KIND_CHAT
        assert rest[-1].finish.reason == pb.FINISH_REASON_LENGTH and rest[-1].usage.completion_tokens == 48
        assert proc.proc.wait(30) == 0
        channel.close()
    finally:
        proc.stop()
