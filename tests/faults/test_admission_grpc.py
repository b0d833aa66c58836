"""The gRPC admission interceptor on a real grpc.aio server: the excess is RESOURCE_EXHAUSTED with RetryInfo.

The limited method here is the standard health service's Watch, a server stream that stays open
until the client leaves: one open Watch fills a limit of 1. (The router limits Generate the same
way; tests/faults/test_faults.py overloads the real routers.)
"""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from prometheus_client import CollectorRegistry

from macaron.admission import AdmissionSettings
from macaron.grpc_admission import AdmissionInterceptor
from macaron.sdk import RateLimitError
from macaron.sdk._exceptions import error_from_rpc

WATCH = "/grpc.health.v1.Health/Watch"


async def _first(call: grpc.aio.UnaryStreamCall) -> health_pb2.HealthCheckResponse:
    async for item in call:
        return item
    raise AssertionError("the stream ended without a message")


async def test_excess_is_resource_exhausted_with_retry_info_and_a_freed_slot_serves_again() -> None:
    registry = CollectorRegistry()
    interceptor = AdmissionInterceptor(AdmissionSettings(max_in_flight=1, retry_after_s=2.5), {WATCH},
                                       registry=registry, metric_prefix="test")
    server = grpc.aio.server(interceptors=[interceptor])
    health = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    await health.set("", health_pb2.HealthCheckResponse.SERVING)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            first = stub.Watch(health_pb2.HealthCheckRequest(), timeout=30)
            assert (await _first(first)).status == health_pb2.HealthCheckResponse.SERVING  # admitted, holding its slot
            assert registry.get_sample_value("test_admission_in_flight") == 1

            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await _first(stub.Watch(health_pb2.HealthCheckRequest(), timeout=30))
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            error = error_from_rpc(refused.value)
            assert isinstance(error, RateLimitError) and error.retry_after_s == 2.5
            assert "overloaded" in error.message
            assert registry.get_sample_value("test_admission_rejected_total", {"method": WATCH}) == 1

            # A method that is not limited still answers.
            assert (await stub.Check(health_pb2.HealthCheckRequest(), timeout=10)).status == 1

            first.cancel()  # the client leaves: the slot comes back
            for _ in range(100):
                if registry.get_sample_value("test_admission_in_flight") == 0:
                    break
                await asyncio.sleep(0.05)
            second = stub.Watch(health_pb2.HealthCheckRequest(), timeout=30)
            assert (await _first(second)).status == health_pb2.HealthCheckResponse.SERVING
            second.cancel()
    finally:
        await server.stop(0)


async def test_zero_means_no_limit() -> None:
    interceptor = AdmissionInterceptor(AdmissionSettings(max_in_flight=0), {WATCH}, registry=CollectorRegistry())
    server = grpc.aio.server(interceptors=[interceptor])
    health = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            calls = [stub.Watch(health_pb2.HealthCheckRequest(), timeout=30) for _ in range(3)]
            assert len([await _first(call) for call in calls]) == 3
            for call in calls:
                call.cancel()
    finally:
        await server.stop(0)
