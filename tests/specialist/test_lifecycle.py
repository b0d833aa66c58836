"""Overload, a dead engine and SIGTERM, on the session's lone specialist process (see conftest).

It serves `chat` over two replicas: a victim engine this module kills, and the session's
engine. It allows one stream at a time (to see RESOURCE_EXHAUSTED) and is drained last.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from macaron.v1 import common_pb2 as pb

from .helpers import error_of, generate, request, stub
from .processes import SPECIALIST_SERVICE, Subprocess

LONG = pb.SamplingParams(max_new_tokens=300, min_new_tokens=300, temperature=0.0)


@dataclass
class Lone:
    port: int
    victim_url: str
    shared_url: str
    victim: Subprocess
    specialist: Subprocess


@pytest.fixture(scope="module")
def lone(stack) -> Lone:
    return Lone(stack.lone_port, stack.victim_url, stack.engine_url, stack.victim, stack.lone)


def test_overload_is_resource_exhausted_with_retry_info(lone: Lone) -> None:
    s = stub(lone.port)
    first = s.Generate(request("Keep talking.", sampling=LONG), timeout=60)
    next(first)
    error = error_of(s, request("Me too."))
    first.cancel()
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    trailers = dict(error.trailing_metadata())
    assert trailers["retry-after-ms"] == "750"
    info = error_details_pb2.RetryInfo()
    assert status_pb2.Status.FromString(trailers["grpc-status-details-bin"]).details[0].Unpack(info)
    assert info.retry_delay.ToMilliseconds() == 750


def _wait_free(s, timeout: float = 10.0) -> None:
    """Waits until the cancelled stream of the previous test has left the specialist."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            generate(s, request(sampling=pb.SamplingParams(max_new_tokens=1)))
            return
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            time.sleep(0.1)


def test_engine_killed_mid_stream_is_unavailable_then_fails_over(lone: Lone) -> None:
    s = stub(lone.port)
    _wait_free(s)
    call = s.Generate(request("Keep talking.", sampling=LONG, engine_replica_hint=lone.victim_url), timeout=60)
    assert next(call).route.replica == lone.victim_url
    next(call)
    os.killpg(lone.victim.proc.pid, signal.SIGKILL)
    started = time.monotonic()
    with pytest.raises(grpc.RpcError) as caught:
        for _ in call:
            pass
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE, caught.value.details()
    assert time.monotonic() - started < 10
    # The next request (even one hinted at the dead replica) is served by the live one.
    result = generate(s, request(sampling=pb.SamplingParams(max_new_tokens=4), engine_replica_hint=lone.victim_url))
    assert result.route.replica == lone.shared_url


def test_sigterm_drains_in_flight_streams(lone: Lone) -> None:
    s = stub(lone.port)
    _wait_free(s)
    channel = grpc.insecure_channel(f"127.0.0.1:{lone.port}")
    watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=SPECIALIST_SERVICE))
    statuses: list[int] = []
    watcher = threading.Thread(target=lambda: _collect(watch, statuses), daemon=True)
    watcher.start()

    call = s.Generate(request("Keep talking.", sampling=LONG), timeout=60)
    next(call)
    os.killpg(lone.specialist.proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while health_pb2.HealthCheckResponse.NOT_SERVING not in statuses and time.monotonic() < deadline:
        time.sleep(0.05)
    assert statuses[0] == health_pb2.HealthCheckResponse.SERVING
    assert health_pb2.HealthCheckResponse.NOT_SERVING in statuses
    refused = error_of(s, request(), timeout=5)
    assert refused.code() == grpc.StatusCode.UNAVAILABLE

    chunks = list(call)  # the in-flight stream runs to its end
    assert chunks[-1].finish.reason == pb.FINISH_REASON_LENGTH and chunks[-1].usage.completion_tokens == 300
    watch.cancel()
    assert lone.specialist.proc.wait(15) == 0
    channel.close()


def _collect(watch, statuses: list[int]) -> None:
    try:
        for answer in watch:
            statuses.append(answer.status)
    except grpc.RpcError:
        pass
