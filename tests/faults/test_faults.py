"""Faults under load: overload, clients that leave, Redis, a router, a specialist and an engine dying.

For every fault the load generator counts requests sent, completed, failed with a clear error and
lost (no answer by the deadline); lost is always 0. Loads are small (a 2-core machine) and bounded
in time; the order matters only in that each test repairs what it broke.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable

import httpx
import openai
import pytest
from grpc_health.v1 import health_pb2

from faults.stack import FaultStack, kill, rss_mb, stack_pids
from macaron.loadgen import LoadConfig, LoadReport, run_load
from macaron.loadgen.workload import Workload, load_dev_prompts

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

DEADLINE_S = 30.0
MAX_OVERLOAD_RSS_GROWTH_MB = 300.0
"""Generous: the excess is refused before any work, so a few seconds of overload may add buffers, not a queue."""
STORE_HEALTH = "macaron.v1.Router/store"


def counts(report: LoadReport) -> dict[str, object]:
    """The run's outcome counts, with the first few failures' details so a failed assertion explains itself."""
    failed = [f"turn {r.turn} {r.label}: {r.outcome} {r.detail[:200]}" for r in report.results if not r.ok]
    return {"sent": report.sent, "completed": report.completed, "clear_errors": report.clear_errors,
            "lost": report.lost, "errors": report.errors(), "first_failures": failed[:5]}


def load(stack: FaultStack, *, during: Callable[[], None] | None = None, at_s: float = 1.0, **config: object) -> LoadReport:
    """A bounded REST load against the gateway; `during` runs in a thread `at_s` seconds in (the fault)."""
    options = {"duration_s": 4.0, "max_requests": 200, "timeout_s": DEADLINE_S, "max_tokens": 8, "turns": 2, **config}
    if "rate" not in options and "concurrency" not in options:
        options["concurrency"] = 3
    cfg = LoadConfig(stack.gateway_url, **options)  # type: ignore[arg-type]

    async def main() -> LoadReport:
        task = asyncio.create_task(run_load(cfg, workload=Workload(PROMPTS, turns=cfg.turns, seed=cfg.seed)))
        if during is not None:
            await asyncio.sleep(at_s)
            await asyncio.to_thread(during)
        return await task

    report = asyncio.run(main())
    print(counts(report))
    assert report.lost == 0, counts(report)
    assert report.sent > 0
    return report


PROMPTS = load_dev_prompts()


def router_store_status(target: str) -> int:
    import grpc
    from grpc_health.v1 import health_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        return health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=STORE_HEALTH), timeout=2.0).status


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Polls until `condition` holds; returns the seconds it took."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if condition():
                return time.monotonic() - start
        except Exception:  # noqa: BLE001 - a part still down answers with errors until it is back
            pass
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


def chat(stack: FaultStack, session_id: str, text: str, **extra: object) -> httpx.Response:
    body = {"model": "macaron-auto", "max_tokens": 4, "messages": [{"role": "user", "content": text}], **extra}
    return httpx.post(stack.gateway_url + "/v1/chat/completions", json=body, headers={"x-session-id": session_id},
                      timeout=DEADLINE_S)


def test_steady_load_hits_every_specialist(fault_stack: FaultStack) -> None:
    report = load(fault_stack, concurrency=2, duration_s=4.0)
    summary = report.summary()
    assert report.completed == report.sent, counts(report)
    assert set(summary["route_mix"]) == {"agent", "chat", "code", "ui"}, summary["route_mix"]
    assert summary["cached_token_share"] > 0  # shared system prompts and growing history hit the prefix cache


def test_load_over_grpc_through_the_sdk(fault_stack: FaultStack) -> None:
    cfg = LoadConfig(fault_stack.router_targets[1], transport="grpc", concurrency=2, duration_s=2.0, max_requests=50,
                     timeout_s=DEADLINE_S, max_tokens=8, turns=2)
    report = asyncio.run(run_load(cfg, workload=Workload(PROMPTS, turns=2)))
    print(counts(report))
    assert report.sent > 0 and report.completed == report.sent, counts(report)
    assert all(r.ttft_s is not None and r.specialist for r in report.results)
    assert any(r.cached_tokens > 0 for r in report.results)


def test_overload_gets_429_with_retry_after_and_accepted_requests_complete(fault_stack: FaultStack) -> None:
    before = rss_mb(stack_pids(fault_stack))
    report = load(fault_stack, rate=60.0, duration_s=2.5, max_tokens=48, turns=1, max_requests=150)
    after = rss_mb(stack_pids(fault_stack))
    print(f"stack RSS {before:.0f} MB before the overload, {after:.0f} MB after")
    assert after - before < MAX_OVERLOAD_RSS_GROWTH_MB, "memory grew under overload: is a queue unbounded?"
    rejected = [r for r in report.results if r.outcome == "http_429"]
    assert rejected, f"no back-pressure at 60 req/s: {counts(report)}"
    assert all(r.retry_after_s and r.retry_after_s >= 1 for r in rejected)
    # Refused at the front door (admission control), not deep in the path after queueing.
    assert all("in flight" in r.detail for r in rejected), {r.detail for r in rejected}
    assert {r.outcome for r in report.results} <= {"ok", "http_429"}, counts(report)
    assert report.completed >= 1
    assert fault_stack.gateway.proc.poll() is None
    refused = httpx.get(fault_stack.gateway_url + "/metrics", timeout=10).text
    assert 'macaron_gateway_admission_rejected_total{path="/v1/chat/completions"}' in refused


def test_overload_over_grpc_gets_resource_exhausted_with_retry_info(fault_stack: FaultStack) -> None:
    """SDK clients skip the gateway: the router's own front door refuses their excess at once."""
    cfg = LoadConfig(fault_stack.router_targets[1], transport="grpc", rate=50.0, duration_s=2.0, max_requests=120,
                     timeout_s=DEADLINE_S, max_tokens=48, turns=1, max_retries=0)
    report = asyncio.run(run_load(cfg, workload=Workload(PROMPTS, turns=1, seed=cfg.seed)))
    print(counts(report))
    assert report.lost == 0, counts(report)
    rejected = [r for r in report.results if r.outcome == "grpc_RESOURCE_EXHAUSTED"]
    assert rejected, f"no back-pressure at 50 calls/s: {counts(report)}"
    assert all(r.retry_after_s >= 1.0 and "in flight" in r.detail for r in rejected)  # RetryInfo from the router
    assert {r.outcome for r in report.results} <= {"ok", "grpc_RESOURCE_EXHAUSTED"}, counts(report)
    assert report.completed >= 1


def test_clients_leaving_mid_stream_stop_the_engine_work(fault_stack: FaultStack) -> None:
    body = {"model": "macaron-auto", "max_tokens": 1900, "min_tokens": 1900, "stream": True,
            "messages": [{"role": "user", "content": "Tell me a very long story about the sea."}]}
    clients = [httpx.Client(base_url=fault_stack.gateway_url, timeout=DEADLINE_S) for _ in range(4)]
    streams = [c.stream("POST", "/v1/chat/completions", json=body, headers={"x-session-id": uuid.uuid4().hex})
               for c in clients]
    responses = [s.__enter__() for s in streams]
    lines = [response.iter_lines() for response in responses]  # one iterator each: dropping one closes the stream
    try:
        for response, it in zip(responses, lines):
            assert response.status_code == 200
            next(line for line in it if '"content":"' in line and '"content":""' not in line)  # a first token
        wait_for(lambda: fault_stack.engine_running() >= len(responses), 5.0, "every stream running in the engines")
    finally:
        for client in clients:
            client.close()  # the connections go away mid-stream
    took = wait_for(lambda: fault_stack.engine_running() == 0, 5.0, "engine work after clients left")
    print(f"engine running count back to 0 in {took:.2f} s")
    assert took <= 1.0


LONG_ANSWER = {"max_tokens": 1900, "min_tokens": 1900}
"""An answer that takes seconds of decoding on any CPU, far longer than the short deadlines below (the tiny model's
context is 2,048 tokens; a fast machine decoded 1,500 of them within a 3 s deadline)."""
STORY = [{"role": "user", "content": "Tell me a very long story about the sea."}]


def test_short_client_deadline_is_a_clear_504_and_the_engine_stops_the_work(fault_stack: FaultStack) -> None:
    """The official client's read timeout (2 s) reaches the gateway as x-stainless-read-timeout: the answer is
    the gateway's 504 (type timeout), not the client's own timeout, and the engine frees the request."""
    client = openai.OpenAI(base_url=fault_stack.gateway_url + "/v1", api_key="unused", max_retries=0, timeout=2.0)
    with pytest.raises(openai.APIStatusError) as err:  # openai.APITimeoutError would mean the gateway was late
        client.chat.completions.create(model="macaron-chat", messages=STORY, max_tokens=LONG_ANSWER["max_tokens"],
                                       extra_body={"min_tokens": LONG_ANSWER["min_tokens"]})
    assert err.value.status_code == 504 and err.value.body["type"] == "timeout", err.value.body
    took = wait_for(lambda: fault_stack.engine_running() == 0, 10.0, "engine work after the deadline")
    print(f"engine running count back to 0 {took:.2f} s after the 504")


def test_stream_past_its_deadline_ends_with_an_error_event_and_the_engine_stops(fault_stack: FaultStack) -> None:
    body = {"model": "macaron-chat", "stream": True, "messages": STORY, **LONG_ANSWER}
    with httpx.stream("POST", fault_stack.gateway_url + "/v1/chat/completions", json=body,
                      headers={"x-macaron-timeout": "1.5", "x-session-id": uuid.uuid4().hex}, timeout=DEADLINE_S) as response:
        assert response.status_code == 200
        frames = (line[5:].strip() for line in response.iter_lines() if line.startswith("data:"))
        next(f for f in frames if '"content":"' in f and '"content":""' not in f)  # a first token
        assert fault_stack.engine_running() >= 1  # it runs in an engine
        rest = list(frames)
    assert rest[-1] == "[DONE]" and json.loads(rest[-2])["error"]["type"] == "timeout", rest[-2:]
    wait_for(lambda: fault_stack.engine_running() == 0, 10.0, "engine work after the deadline")


def test_sdk_deadline_is_deadline_exceeded_and_the_engine_stops_the_work(fault_stack: FaultStack) -> None:
    """An SDK caller of a router: its gRPC deadline reaches the specialist and the engine call."""
    from macaron.sdk import APITimeoutError, MacaronClient

    with MacaronClient(fault_stack.router_targets[0], timeout=2.0, max_retries=0) as client:
        with pytest.raises(APITimeoutError) as err:
            client.chat.create(messages=STORY, specialist="chat", **LONG_ANSWER)
    assert err.value.code.name == "DEADLINE_EXCEEDED"
    wait_for(lambda: fault_stack.engine_running() == 0, 10.0, "engine work after the deadline")


def test_long_client_deadline_still_completes(fault_stack: FaultStack) -> None:
    client = openai.OpenAI(base_url=fault_stack.gateway_url + "/v1", api_key="unused", max_retries=0, timeout=DEADLINE_S)
    completion = client.chat.completions.with_raw_response.create(
        model="macaron-chat", messages=STORY, max_tokens=8, extra_headers={"x-macaron-timeout": str(DEADLINE_S)})
    assert completion.status_code == 200
    assert completion.parse().choices[0].finish_reason in ("stop", "length")


def test_redis_killed_and_restarted(fault_stack: FaultStack) -> None:
    redis_server = fault_stack.redis
    redis_server.kill()
    try:
        report = load(fault_stack, concurrency=2, duration_s=3.0)
        assert report.completed == report.sent, counts(report)  # routing continues, degraded
        for target in fault_stack.router_targets:
            wait_for(lambda t=target: router_store_status(t) == health_pb2.HealthCheckResponse.NOT_SERVING, 10,
                     "router health reporting the store")
    finally:
        redis_server.start()
    for target in fault_stack.router_targets:
        took = wait_for(lambda t=target: router_store_status(t) == health_pb2.HealthCheckResponse.SERVING, 20,
                        "router health after Redis returned")
        print(f"router {target} store healthy again after {took:.2f} s")
    session = "fault-redis-" + uuid.uuid4().hex[:8]
    assert chat(fault_stack, session, "Write a Python function that reverses a list.").status_code == 200
    # The restarted Redis starts empty; the session (keyed by a digest of its id) is written there again.
    wait_for(lambda: any(b"session:" in k for k in redis_server.client().scan_iter(count=1000)),
             5, "the session written to the restarted Redis")
    # and both routers route its next turn by it: the state is shared again, whichever router wrote it
    from macaron.sdk import MacaronClient

    follow_up = [{"role": "user", "content": "Write a Python function that reverses a list."},
                 {"role": "assistant", "content": "def rev(xs): ..."},
                 {"role": "user", "content": "And now make it work on strings too."}]
    for target in fault_stack.router_targets:
        with MacaronClient(target, timeout=DEADLINE_S, max_retries=0) as client:
            decision = client.chat.classify(messages=follow_up, session_id=session)
        assert decision.route.reason == "session", (target, decision.route)


def test_router_replica_killed_behind_the_gateway(fault_stack: FaultStack) -> None:
    session = "fault-router-" + uuid.uuid4().hex[:8]
    first = chat(fault_stack, session, "Write a Python function that sorts a dict by value.")
    assert first.status_code == 200
    report = load(fault_stack, concurrency=2, duration_s=4.0, during=lambda: kill(fault_stack.routers[0]))
    assert report.completed >= report.sent * 0.7, counts(report)
    assert set(report.errors()) <= {"stream_error:unavailable", "http_503"}, counts(report)  # clear, never hangs
    after = [chat(fault_stack, session, "And now make it sort in reverse order.") for _ in range(3)]
    assert all(r.status_code == 200 for r in after)
    assert after[-1].headers["x-macaron-route-reason"] == "session"  # the session lives in the shared store
    assert after[-1].headers["x-macaron-specialist"] == first.headers["x-macaron-specialist"]
    # Router 0 stays down (a restart costs ~20 s of a busy 2-core machine): the later tests go through router 1.


def test_specialist_replica_killed_pool_serves_on(fault_stack: FaultStack) -> None:
    report = load(fault_stack, concurrency=3, duration_s=4.0, during=lambda: kill(fault_stack.specialists[1]))
    assert report.completed >= report.sent * 0.8, counts(report)
    assert set(report.summary()["route_mix"]) == {"agent", "chat", "code", "ui"}
    late = [r for r in report.results if r.start_s > 2.5]
    assert late and all(r.ok for r in late), counts(report)  # once it is gone, every pool serves from replica A
    fault_stack.restart_specialists(1)


def test_engine_replica_killed_and_restarted(fault_stack: FaultStack) -> None:
    engine0 = fault_stack.engine_urls[0]

    def crash_and_restart() -> None:
        kill(fault_stack.engines[0])
        fault_stack.restart_engine(0, wait=False)

    report = load(fault_stack, concurrency=3, duration_s=5.0, during=crash_and_restart)
    bad = {k for k in report.errors() if not k.startswith(("http_5", "stream_error", "http_429"))}
    assert not bad, counts(report)  # failures are clear HTTP statuses or error events, never hangs
    assert report.completed > 0
    wait_for(lambda: httpx.get(engine0 + "/health", timeout=2).status_code == 200, 120, "restarted engine")

    from macaron.sdk import MacaronClient

    def served_by_restarted() -> bool:
        with MacaronClient(fault_stack.router_targets[1], timeout=DEADLINE_S) as client:
            result = client.chat.create(messages=[{"role": "system", "content": uuid.uuid4().hex},
                                                  {"role": "user", "content": "hello there"}], max_tokens=2)
        return result.route.replica.rstrip("/") == engine0

    took = wait_for(served_by_restarted, 60, "traffic on the restarted engine")
    print(f"traffic back on the restarted engine {took:.2f} s after it was healthy")


def test_loadtest_command_against_the_gateway(fault_stack: FaultStack, tmp_path, capsys) -> None:
    from macaron.cli import main

    out = tmp_path / "load.json"
    code = main(["loadtest", "--url", fault_stack.gateway_url, "--concurrency", "1", "--duration", "1.5",
                 "--max-tokens", "4", "--timeout", str(DEADLINE_S), "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "closed loop x1 over rest" in printed and "route mix:" in printed
    summary = __import__("json").loads(out.read_text())["summary"]
    assert summary["sent"] >= 1 and summary["lost"] == 0 and summary["completed"] == summary["sent"]
