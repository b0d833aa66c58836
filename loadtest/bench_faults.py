"""Benchmark of the stack under overload and faults: nothing lost, back-pressure instead of collapse.

    python loadtest/bench_faults.py --quick                 # under three minutes on a busy 2-core machine
    python loadtest/bench_faults.py                         # longer phases
    python loadtest/bench_faults.py --quick --model tiny    # the tests' random tiny model instead

Starts the fault suite's stack on loopback (two engine replicas, two specialist replicas per
pool, two routers sharing a redis-server of its own, the gateway in front, admission control
on the gateway and the routers; SmolLM2 and its four trained specialists unless --model says
otherwise) and runs the load generator (`macaron.loadgen`) through four phases:

1. steady: closed-loop multi-turn sessions (the baseline);
2. overload: open-loop arrivals far beyond capacity: the share answered 429 (with Retry-After)
   and the p99 end-to-end latency of the accepted requests;
3. engine kill: one engine replica SIGKILLed under load and restarted at once; recovery is the
   time from the kill until a request is served by the restarted replica again;
4. Redis kill: Redis SIGKILLed under load and restarted after `REDIS_DOWN_S` (the requests sent
   meanwhile are routed without the store, degraded: `redis_outage_requests` and how many of
   them completed); recovery is the time from the restart until every router reports its store
   healthy (`redis_store_healthy_s`) and then until sessions are shared again: a new session's
   turn through one router is written to the new Redis and the other router routes its next turn
   by that session (Classify), both ways at once (`redis_kill_recovery_s`; `redis_probe_s`
   is what the successful probe's requests took, so the state was back somewhere within that last
   stretch). The phase's load uses short
   answers so that requests keep flowing through the outage and the recovery.

Every phase counts requests sent, completed, failed with a clear error, and lost (no answer by
the deadline). The load generator sends its 30 s deadline (`x-macaron-timeout`), so a request the
stack cannot finish in time is stopped and answered 504 before it, a clear error; `--max-in-flight`
sets the gateway's admission limit to see that at limits where requests wait longer. Peak RSS is the largest sum of the stack's processes' resident memory sampled
during the run. Overload runs twice, at 60/s and at 120/s, and reports for each how far the stack's
RSS rose above its level just before (`overload_rss_growth_mb`, `overload_2x_rss_growth_mb`):
bounded memory means doubling the excess does not grow it; `overload_429_p99_ms` is how fast the
excess is refused. Human-readable lines go to stderr; the last line on stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the fault suite's stack helpers

from faults.stack import FaultStack, kill, rss_mb, stack_pids, start_fault_stack, stop_fault_stack  # noqa: E402
from macaron.loadgen import LoadConfig, LoadReport, run_load  # noqa: E402
from macaron.loadgen.report import percentile  # noqa: E402
from macaron.loadgen.workload import Workload, load_dev_prompts  # noqa: E402

DEADLINE_S = 30.0
MAX_IN_FLIGHT = {"smollm2": 3, "tiny": 6, "bench": 3}
"""The gateway's admission limit per model: about what the two CPU engines finish well within the deadline
(never below the closed-loop phases' 3 clients, which would otherwise spin on 429s)."""
OVERLOAD_MAX_TOKENS = 24
STORE_HEALTH = "macaron.v1.Router/store"
REDIS_KILL_AT_S = 1.0
REDIS_DOWN_S = 3.0
"""How long Redis stays dead: long enough for the closed-loop clients to send requests into the outage."""
REDIS_PHASE_MAX_TOKENS = 2
"""Short answers in the Redis phase: each client sends a request every few seconds, before, during and after
the outage (with 8-token answers a SmolLM2 turn took ~9 s, so a short phase sent nothing after the kill)."""
SESSION_PROBE = ("Write a Python function that sorts a dict by value.", "And now make it sort in reverse order.")


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class MemorySampler(threading.Thread):
    """Samples the stack's summed RSS every 0.25 s; keeps the peak of the run and of the current window."""

    def __init__(self, stack: FaultStack) -> None:
        super().__init__(daemon=True)
        self.stack = stack
        self.peak_mb = 0.0
        self.window_peak_mb = 0.0
        self._halt = threading.Event()

    def begin_window(self) -> float:
        """Starts a new window; returns the RSS now (the window's baseline)."""
        now = rss_mb(stack_pids(self.stack))
        self.window_peak_mb = now
        return now

    def run(self) -> None:
        while not self._halt.is_set():
            now = rss_mb(stack_pids(self.stack))
            self.peak_mb = max(self.peak_mb, now)
            self.window_peak_mb = max(self.window_peak_mb, now)
            self._halt.wait(0.25)

    def stop(self) -> None:
        self._halt.set()
        self.join(2)


def load(stack: FaultStack, prompts, *, fault=None, at_s: float = 1.0, **options) -> LoadReport:
    cfg = LoadConfig(stack.gateway_url, **{"timeout_s": DEADLINE_S, "max_tokens": 8, "turns": 2, "max_requests": 400, **options})

    async def main() -> LoadReport:
        task = asyncio.create_task(run_load(cfg, workload=Workload(prompts, turns=cfg.turns, seed=cfg.seed)))
        if fault is not None:
            await asyncio.sleep(at_s)
            await asyncio.to_thread(fault)
        return await task

    return asyncio.run(main())


def wait_for(condition, timeout: float) -> float | None:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if condition():
                return time.monotonic() - start
        except Exception:  # noqa: BLE001 - the part is still coming back
            pass
        time.sleep(0.1)
    return None


def store_serving(target: str) -> bool:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        status = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=STORE_HEALTH), timeout=2.0).status
    return status == health_pb2.HealthCheckResponse.SERVING


def served_by(stack: FaultStack, engine_url: str) -> bool:
    from macaron.sdk import MacaronClient

    with MacaronClient(stack.router_targets[1], timeout=DEADLINE_S, max_retries=0) as client:
        result = client.chat.create(messages=[{"role": "system", "content": uuid.uuid4().hex},
                                              {"role": "user", "content": "hello there"}], max_tokens=2)
    return result.route.replica.rstrip("/") == engine_url


def sessions_shared(stack: FaultStack, first: str, second: str) -> bool:
    """A new session's first turn through router `first` is written to the (new) Redis, and router `second` routes
    its next turn by that session (Classify: the decision without another generation): the shared state works
    again, end to end."""
    from macaron.router.sessions import session_key
    from macaron.sdk import MacaronClient

    session = "bench-redis-" + uuid.uuid4().hex[:12]
    key = "macaron:" + session_key("dev", session)  # the routers run in dev mode: every caller is "dev"
    with MacaronClient(first, timeout=DEADLINE_S, max_retries=0) as client:
        client.chat.create(messages=[{"role": "user", "content": SESSION_PROBE[0]}], session_id=session, max_tokens=1)
    if wait_for(lambda: stack.redis.client().exists(key) > 0, 5.0) is None:  # written after the first token
        return False
    with MacaronClient(second, timeout=DEADLINE_S, max_retries=0) as client:  # the decision its Generate would take
        turn = client.chat.classify(messages=[{"role": "user", "content": SESSION_PROBE[0]},
                                              {"role": "assistant", "content": "def f(d): ..."},
                                              {"role": "user", "content": SESSION_PROBE[1]}], session_id=session)
    return turn.route.reason == "session"


def during(report: LoadReport, start_s: float, end_s: float) -> list:
    """The requests of `report` sent between `start_s` and `end_s` (seconds since the load began)."""
    return [r for r in report.results if start_s <= r.start_s < end_s]


def line(name: str, report: LoadReport) -> None:
    s = report.summary()
    say(f"{name:<10} sent {s['sent']:>4}  completed {s['completed']:>4}  clear errors {s['clear_errors']:>4}  "
        f"lost {s['lost']}  e2e p50/p99 {s['e2e']['p50_ms']}/{s['e2e']['p99_ms']} ms  errors {s['errors']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="Short phases (under three minutes).")
    parser.add_argument("--model", choices=("smollm2", "tiny", "bench"), default="smollm2",
                        help="Built-in model the engine replicas serve (default: smollm2, the real default model).")
    parser.add_argument("--max-in-flight", type=int, default=None,
                        help="The gateway's admission limit (default: the model's, see MAX_IN_FLIGHT).")
    args = parser.parse_args()
    max_in_flight = MAX_IN_FLIGHT[args.model] if args.max_in_flight is None else args.max_in_flight
    scale = 1.0 if args.quick else 3.0

    from macaron.assets.builtin import ensure_builtin_model

    say(f"model {args.model} (built and cached on first use) ...")
    assets = ensure_builtin_model(args.model, progress=False)
    prompts = load_dev_prompts()
    workdir = Path(tempfile.mkdtemp(prefix="macaron-bench-faults-"))
    say("starting the stack: 2 engines, 2 specialist replicas per pool, 2 routers, Redis, gateway ...")
    started = time.monotonic()
    stack = start_fault_stack(workdir, assets.model_dir, dict(assets.adapters),
                              gateway_max_in_flight=max_in_flight)
    say(f"stack ready in {time.monotonic() - started:.1f} s")
    sampler = MemorySampler(stack)
    sampler.start()
    reports: dict[str, LoadReport] = {}
    result: dict[str, object] = {}
    try:
        reports["steady"] = load(stack, prompts, concurrency=3, duration_s=4.0 * scale)
        line("steady", reports["steady"])

        # Overload at 60/s, then at twice that: if memory is bounded, the second adds no more than the first.
        for name, rate in (("overload", 60.0), ("overload_2x", 120.0)):
            baseline = sampler.begin_window()
            reports[name] = load(stack, prompts, rate=rate, duration_s=3.0 * scale, max_tokens=OVERLOAD_MAX_TOKENS, turns=1,
                                 max_requests=int(rate * 3.0 * scale) + 10)
            result[f"{name}_rss_growth_mb"] = round(sampler.window_peak_mb - baseline, 1)
            line(name, reports[name])
            say(f"{name:<10} stack RSS {baseline:.0f} MB before, peak {sampler.window_peak_mb:.0f} MB during")
        over = reports["overload"]
        accepted = [r.e2e_s for r in over.results if r.ok and r.e2e_s is not None]
        result["overload_429_share"] = round(sum(r.outcome == "http_429" for r in over.results) / max(over.sent, 1), 3)
        p99 = percentile(accepted, 99)
        result["overload_p99_ms_accepted"] = round(p99 * 1000, 1) if p99 is not None else None
        refused = [r.e2e_s for r in over.results if r.outcome == "http_429" and r.e2e_s is not None]
        p99 = percentile(refused, 99)
        result["overload_429_p99_ms"] = round(p99 * 1000, 1) if p99 is not None else None  # "quickly"

        engine0 = stack.engine_urls[0]

        def crash_engine() -> None:
            """Kill, restart at once, and time (while the load goes on) until the replica serves again."""
            killed_at = time.monotonic()
            kill(stack.engines[0])
            stack.restart_engine(0, wait=False)
            back = wait_for(lambda: served_by(stack, engine0), 120)
            result["engine_kill_recovery_s"] = round(time.monotonic() - killed_at, 2) if back is not None else None

        reports["engine"] = load(stack, prompts, concurrency=3, duration_s=5.0 * scale, fault=crash_engine)
        line("engine", reports["engine"])

        def crash_redis() -> None:
            """Kill, restart REDIS_DOWN_S later, and time the recovery from the restart (see the module's docstring)."""
            stack.redis.kill()
            time.sleep(REDIS_DOWN_S)
            stack.redis.start()
            restarted_at = time.monotonic()
            a, b = stack.router_targets
            healthy = wait_for(lambda: all(store_serving(t) for t in stack.router_targets), 60)
            result["redis_store_healthy_s"] = None if healthy is None else round(healthy, 2)
            probe_started: list[float] = []

            def probe() -> bool:
                probe_started.append(time.monotonic())
                with ThreadPoolExecutor(2) as pool:  # both ways at once: the probe's own time bounds the figure
                    return all(pool.map(lambda pair: sessions_shared(stack, *pair), ((a, b), (b, a))))

            shared = healthy is not None and wait_for(probe, 60) is not None
            done = time.monotonic()
            result["redis_kill_recovery_s"] = round(done - restarted_at, 2) if shared else None
            # what the successful probe's own requests took (the state was back somewhere within them)
            result["redis_probe_s"] = round(done - probe_started[-1], 2) if shared else None

        reports["redis"] = load(stack, prompts, concurrency=3, duration_s=(REDIS_KILL_AT_S + REDIS_DOWN_S) * scale + 4.0,
                                max_tokens=REDIS_PHASE_MAX_TOKENS, fault=crash_redis, at_s=REDIS_KILL_AT_S)
        outage = during(reports["redis"], REDIS_KILL_AT_S, REDIS_KILL_AT_S + REDIS_DOWN_S)
        result["redis_outage_requests"] = len(outage)
        result["redis_outage_completed"] = sum(r.ok for r in outage)
        line("redis", reports["redis"])
    finally:
        sampler.stop()
        stop_fault_stack(stack)
    totals = {
        "requests": sum(r.sent for r in reports.values()),
        "completed": sum(r.completed for r in reports.values()),
        "clear_errors": sum(r.clear_errors for r in reports.values()),
        "lost": sum(r.lost for r in reports.values()),
    }
    out = {**totals, **result, "peak_rss_mb": round(sampler.peak_mb, 1), "model": args.model,
           "max_in_flight": max_in_flight,
           "phases": {name: {k: r.summary()[k] for k in ("sent", "completed", "clear_errors", "lost", "errors")}
                      for name, r in reports.items()},
           # what each lost request had seen: a first token (the stream had started) or nothing
           "lost_requests": [{"phase": name, "start_s": round(r.start_s, 2), "specialist": r.specialist,
                              "ttft_s": None if r.ttft_s is None else round(r.ttft_s, 2)}
                             for name, report in reports.items() for r in report.results if r.lost]}
    print(json.dumps(out))
    return 0 if totals["lost"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
