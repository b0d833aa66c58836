"""A bad canary is rolled back by itself; a version that fails the promotion gate never takes traffic.

The bad canary is a real adapter (code@bad) with a fault injected for it at the router's forwarding
step: every request served with that version fails with INTERNAL, as a broken adapter would. The
gate uses a deterministic scorer over the tiny model's greedy outputs (tests/lifecycle/scorers.py).
"""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from macaron.v1 import admin_pb2
from macaron.v1 import common_pb2 as pb

pytestmark = pytest.mark.slow


def request(session: str) -> pb.GenerateRequest:
    return pb.GenerateRequest(session_id=session, messages=[pb.ChatMessage(role=pb.ROLE_USER, content="python code")],
                              sampling=pb.SamplingParams(max_new_tokens=2, temperature=0.0))


async def served(stub, session: str) -> tuple[str, str]:
    """(version, status code name) of one request."""
    version = ""
    try:
        async for chunk in stub.Generate(request(session), timeout=60):
            if chunk.HasField("route") and not version:
                version = chunk.route.adapter_version
    except grpc.aio.AioRpcError as exc:
        return version, exc.code().name
    return version, "OK"


def inject_fault(server, version: str) -> None:
    """Requests the router forwards with `version` fail with INTERNAL (a broken adapter)."""
    forward = server.forwarder.stream

    async def faulty(specialist, req, **kwargs):
        if req.route.adapter_version == version:
            raise grpc.aio.AioRpcError(grpc.StatusCode.INTERNAL, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                       details=f"injected fault for {specialist}@{version}")
        async for chunk in forward(specialist, req, **kwargs):
            yield chunk

    server.forwarder.stream = faulty


async def test_a_failing_canary_is_rolled_back_automatically_with_the_reason(routers, settings, version_stack) -> None:
    watched = settings.model_copy(deep=True)
    watched.router.lifecycle.auto_rollback = watched.router.lifecycle.auto_rollback.model_copy(
        update={"enabled": True, "window_s": 30.0, "min_requests": 5, "check_s": 0.2})
    server, stub, admin = await routers.start(settings=watched)
    inject_fault(server, "bad")
    await admin.LoadAdapter(admin_pb2.LoadAdapterRequest(ref="code@bad", path=str(version_stack.adapters["bad"])),
                            timeout=120)
    started = time.monotonic()
    await admin.StartCanary(admin_pb2.StartCanaryRequest(ref="code@bad", share=0.5, reason="try it"), timeout=30)
    outcomes = []
    n = 0
    while True:
        state = next(s for s in (await admin.ListAdapters(admin_pb2.ListAdaptersRequest(), timeout=10)).specialists
                     if s.specialist == "code")
        if not state.canary:
            break
        assert time.monotonic() - started < 30.0, f"not rolled back within the window: {outcomes[-10:]}"
        outcomes += await asyncio.gather(*(served(stub, f"auto-{n + i}") for i in range(4)))
        n += 4
    took = time.monotonic() - started
    last = state.history[-1]
    assert last.action == "rollback" and last.version == "bad" and last.actor == "router:auto-rollback"
    assert "error rate" in last.reason and "exceeds" in last.reason
    # a failed call carries no route chunk: stable's requests all succeeded, the canary's all failed
    assert set(outcomes) <= {("v1", "OK"), ("", "INTERNAL")}, outcomes
    assert sum(code == "INTERNAL" for _, code in outcomes) >= 5
    after = await asyncio.gather(*(served(stub, f"auto-{i}") for i in range(n)))  # sessions of the canary too
    assert all(r == ("v1", "OK") for r in after), after
    assert took < watched.router.lifecycle.auto_rollback.window_s


async def test_a_version_failing_the_gate_never_takes_traffic(routers, settings, version_stack) -> None:
    gated = settings.model_copy(deep=True)
    gated.router.lifecycle.gate_scorer = "lifecycle.scorers:greedy_agreement"
    gated.router.lifecycle.gate_margin = 0.05
    _, stub, admin = await routers.start(settings=gated)
    for version in ("same", "bad"):
        await admin.LoadAdapter(admin_pb2.LoadAdapterRequest(ref=f"code@{version}",
                                                             path=str(version_stack.adapters[version])), timeout=120)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await admin.StartCanary(admin_pb2.StartCanaryRequest(ref="code@bad", share=1.0), timeout=120)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "gate refused" in err.value.details()
    results = await asyncio.gather(*(served(stub, f"gate-{i}") for i in range(6)))
    assert all(r == ("v1", "OK") for r in results), results
    state = await admin.StartCanary(admin_pb2.StartCanaryRequest(ref="code@same", share=1.0), timeout=120)
    assert state.canary == "same"
    assert await served(stub, "gate-new") == ("same", "OK")
    listed = await admin.ListAdapters(admin_pb2.ListAdaptersRequest(), timeout=10)
    history = next(s for s in listed.specialists if s.specialist == "code").history
    assert [h.action for h in history][-2:] == ["gate_refused", "canary"]
    assert "score 1.0000 vs stable 1.0000" in history[-1].reason


async def test_placement_reads_the_engines_and_a_replica_lacking_a_version_gets_it(routers, version_stack) -> None:
    import httpx

    server, stub, admin = await routers.start()
    await admin.LoadAdapter(admin_pb2.LoadAdapterRequest(ref="code@v2", path=str(version_stack.adapters["v2"])),
                            timeout=120)
    await admin.StartCanary(admin_pb2.StartCanaryRequest(ref="code@v2", share=1.0), timeout=30)

    async def placed(session: str) -> tuple[str, str]:
        async for chunk in stub.Generate(request(session), timeout=60):
            if chunk.HasField("route") and chunk.route.replica:
                return chunk.route.adapter_version, chunk.route.replica
        raise AssertionError("no route chunk")

    version, preferred = await placed("place-0")  # where this prompt goes (prefix affinity)
    other = next(u for u in version_stack.engine_urls if u != preferred)
    assert version == "v2"
    # the preferred replica loses the version behind the router's back (a restart, an operator):
    await server.core.versions.inventory.stop()  # hold the poller, so the state in between can be seen
    httpx.post(f"{preferred}/unload_lora_adapter", json={"lora_name": "code@v2"}, timeout=30).raise_for_status()
    await server.core.versions.inventory.refresh_now(notify=False)
    assert server.core.versions.inventory.has(preferred, "code@v2") is False
    assert {await placed(f"place-{i}") for i in range(1, 5)} == {("v2", other)}  # only where the engine lists it
    server.core.versions.inventory.start()  # the poller gives the replica the version in use
    deadline = time.monotonic() + 20
    while "code@v2" not in {c["id"] for c in httpx.get(f"{preferred}/v1/models", timeout=10).json()["data"]}:
        assert time.monotonic() < deadline, "the replica was not given the version in use"
        await asyncio.sleep(0.2)


async def test_the_inventory_reads_less_while_nothing_changes_and_still_sees_a_change(routers, version_stack) -> None:
    """Idle, the poller spaces its reads of the engines out (doubling up to inventory_max_refresh_s); a version
    loaded on an engine behind the lifecycle's back is still seen, and the reads come back to every
    inventory_refresh_s after it."""
    import httpx

    server, _, _ = await routers.start()
    inventory = server.core.versions.inventory
    deadline = time.monotonic() + 60
    while inventory.interval < 4 * inventory.refresh_s:
        assert time.monotonic() < deadline, "the poller kept reading the engines at its shortest interval"
        await asyncio.sleep(0.1)
    url = version_stack.engine_urls[0]
    httpx.post(f"{url}/load_lora_adapter", json={"lora_name": "code@v3", "lora_path": str(version_stack.adapters["v3"])},
               timeout=60).raise_for_status()
    deadline = time.monotonic() + 60
    while not inventory.has(url, "code@v3"):
        assert time.monotonic() < deadline, "a version loaded behind the lifecycle's back was never seen"
        await asyncio.sleep(0.1)
    assert inventory.interval < 4 * inventory.refresh_s  # back to the short interval (one idle read since, at most)


async def test_a_load_that_fails_anywhere_leaves_nothing_behind(routers, version_stack) -> None:
    import httpx

    _, stub, admin = await routers.start()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await admin.LoadAdapter(admin_pb2.LoadAdapterRequest(ref="code@v9", path="/nowhere/code-v9"), timeout=60)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "refused to load code@v9" in err.value.details()
    for url in version_stack.engine_urls:
        assert "code@v9" not in {c["id"] for c in httpx.get(f"{url}/v1/models", timeout=10).json()["data"]}
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await admin.StartCanary(admin_pb2.StartCanaryRequest(ref="code@v9", share=0.5), timeout=10)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "macaron adapters load" in err.value.details()
    assert await served(stub, "after-failed-load") == ("v1", "OK")
