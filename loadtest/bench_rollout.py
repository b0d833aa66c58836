"""Benchmark of a specialist update under load: load → canary → promote → unload, then a rollback.

    python loadtest/bench_rollout.py --quick    # under two minutes on an idle machine
    python loadtest/bench_rollout.py            # more clients, longer phases

One run starts, on loopback: a redis-server of its own, two embedded engines (tiny model, the code
adapter served as code@v1), the four specialists (one process) and two `macaron router`
processes sharing Redis. Clients run two-turn sessions alternating between the routers while the
operations go through the routers' AdapterAdmin service (the same calls `macaron adapters` makes):

1. load code@v2 (the tiny code adapter with its B matrices scaled) and start a 20 % canary:
   `load_to_serving_s` = from the load call until the first request served by code@v2 finished;
2. promote code@v2, then unload code@v1 (it waits until no request uses it);
3. load code@v3, canary 20 %, rollback: `rollback_effective_s` = from the rollback call until the
   last request served by code@v3 that started after that call (the call's own time if none did);
4. `failed_requests` of `requests` over the whole run (target 0); `base_reloads` = engines whose
   start time or base weight bytes in /server_info changed (the engines expose no reload counter).

A table goes to stdout, then one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_router import SPECIALISTS, START_TIMEOUT_S, Proc, free_port, log, macaron, wait_grpc, wait_http  # noqa: E402

SHARE = 0.2


def base_fingerprint(urls: list[str]) -> list[tuple[Any, Any]]:
    out = []
    for url in urls:
        info = httpx.get(f"{url}/server_info", timeout=10).json()
        out.append((info.get("startup_time"), (info.get("memory_usage") or {}).get("base_weight_bytes")))
    return out


def start(workdir: Path, cache_dir: str | None) -> tuple[list[Proc], list[str], list[int], dict[str, Path]]:
    from macaron.assets import ensure_tiny_model
    from macaron.lifecycle.derive import scaled_adapter

    assets = ensure_tiny_model(cache_dir=cache_dir, progress=False)
    adapters = dict(assets.adapters)
    versions = {v: scaled_adapter(adapters["code"], workdir / f"code-{v}", s) for v, s in (("v2", 0.5), ("v3", 2.0))}
    procs: list[Proc] = []
    try:
        redis_port = free_port()
        procs.append(Proc("redis", ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                                    "--appendonly", "no"], workdir))
        lora = [f"{'code@v1' if n == 'code' else n}={p}" for n, p in adapters.items()]
        engine_ports = [free_port() for _ in range(2)]
        for i, port in enumerate(engine_ports):
            procs.append(macaron(f"engine{i}", ["engine", "--host", "127.0.0.1", "--port", str(port), "--model-path",
                                                str(assets.model_dir), "--log-level", "warning", "--lora-paths", *lora],
                                 workdir))
        engines = [f"http://127.0.0.1:{p}" for p in engine_ports]
        spec_ports = {n: free_port() for n in SPECIALISTS}
        router_ports = [free_port(), free_port()]
        config = workdir / "macaron.yaml"
        config.write_text(yaml.safe_dump({
            "redis_url": f"redis://127.0.0.1:{redis_port}/0",
            "classifier": {"escalation": False},
            "specialists": {"discovery": {"mode": "static", "urls": engines}, "tokenizer_path": str(assets.model_dir),
                            **{n: {"port": p} for n, p in spec_ports.items()}, "code": {"port": spec_ports["code"],
                                                                                          "adapter_version": "v1"}},
            "router": {"pools": {n: [f"127.0.0.1:{p}"] for n, p in spec_ports.items()}, "metrics": False,
                       "lifecycle": {"inventory_refresh_s": 0.5, "usage_heartbeat_s": 0.3, "unload_idle_s": 1.0,
                                     "auto_rollback": {"enabled": False}}},
        }))
        procs.append(macaron("specialists", ["specialist", "--name", "all"], workdir, config))
        for i, port in enumerate(router_ports):
            procs.append(macaron(f"router{i}", ["router", "--port", str(port), "--router-id", f"bench-{i}"], workdir,
                                 config))
        deadline = time.monotonic() + START_TIMEOUT_S
        for i, url in enumerate(engines):
            wait_http(procs[1 + i], url + "/health", deadline)
        specialists = next(p for p in procs if p.name == "specialists")
        for port in spec_ports.values():
            wait_grpc(specialists, port, "macaron.v1.Specialist", deadline)
        for i, port in enumerate(router_ports):
            wait_grpc(next(p for p in procs if p.name == f"router{i}"), port, "macaron.v1.Router", deadline)
        return procs, engines, router_ports, versions
    except BaseException:
        for proc in reversed(procs):
            proc.stop()
        raise


async def wait_sessions(traffic: Any, count: int, timeout: float = 300.0) -> None:
    target = traffic.sessions_started + count
    deadline = time.monotonic() + timeout
    while traffic.sessions_started < target and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


async def rollout(args: argparse.Namespace, engines: list[str], router_ports: list[int],
                  versions: dict[str, Path]) -> dict[str, Any]:
    import grpc

    from macaron.lifecycle.traffic import SessionTraffic
    from macaron.v1 import admin_pb2, admin_pb2_grpc, router_pb2_grpc

    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{p}") for p in router_ports]
    routers = [router_pb2_grpc.RouterStub(c) for c in channels]
    admin_a, admin_b = (admin_pb2_grpc.AdapterAdminStub(c) for c in channels)
    before = base_fingerprint(engines)
    traffic = SessionTraffic(routers, clients=args.clients, turns=2,
                             prompt="Write a Python function that parses a CSV file and returns its rows")
    phases: dict[str, float] = {}
    traffic.start()
    try:
        await wait_sessions(traffic, args.clients * 2)
        t = time.monotonic()
        await admin_a.LoadAdapter(admin_pb2.LoadAdapterRequest(ref="code@v2", path=str(versions["v2"])), timeout=120)
        phases["load"] = time.monotonic() - t
        load_started = t
        t = time.monotonic()
        await admin_b.StartCanary(admin_pb2.StartCanaryRequest(ref="code@v2", share=SHARE), timeout=60)
        phases["canary"] = time.monotonic() - t
        await wait_sessions(traffic, args.sessions)
        t = time.monotonic()
        await admin_a.Promote(admin_pb2.PromoteRequest(specialist="code"), timeout=60)
        phases["promote"] = time.monotonic() - t
        await wait_sessions(traffic, args.clients * 2)
        t = time.monotonic()
        await admin_b.UnloadAdapter(admin_pb2.UnloadAdapterRequest(ref="code@v1"), timeout=300)
        phases["unload (drained)"] = time.monotonic() - t
        await admin_a.LoadAdapter(admin_pb2.LoadAdapterRequest(ref="code@v3", path=str(versions["v3"])), timeout=120)
        await admin_a.StartCanary(admin_pb2.StartCanaryRequest(ref="code@v3", share=SHARE), timeout=60)
        await wait_sessions(traffic, args.sessions // 2)
        rollback_started = time.monotonic()
        await admin_b.Rollback(admin_pb2.RollbackRequest(specialist="code", reason="bench"), timeout=60)
        phases["rollback"] = time.monotonic() - rollback_started
        await wait_sessions(traffic, args.clients * 2)
    finally:
        await traffic.stop()
        for channel in channels:
            await channel.close()
    after = base_fingerprint(engines)
    results = traffic.results
    v2 = [r.ended for r in results if r.version == "v2"]
    late_v3 = [r.started for r in results if r.version == "v3" and r.started >= rollback_started]
    sessions = traffic.sessions()
    code_share = sum(r.specialist == 3 for r in results) / max(1, len(results))
    return {
        "phases": phases,
        "load_to_serving_s": round(min(v2) - load_started, 3) if v2 else None,
        "rollback_effective_s": round(max([phases["rollback"], *[s - rollback_started for s in late_v3]]), 3),
        "failed_requests": len(traffic.failed()),
        "requests": len(results),
        "sessions": len(sessions),
        "sessions_switched": len(traffic.switched(allowed_from=frozenset({"v3"}))),
        "code_route_share": round(code_share, 3),
        "versions_served": {v: sum(r.version == v for r in results) for v in ("v1", "v2", "v3")},
        "base_reloads": sum(a != b for a, b in zip(before, after)),
        "failures": [f"{r.code} {r.version}" for r in traffic.failed()[:5]],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="Fewer clients and sessions (under two minutes).")
    parser.add_argument("--cache-dir", default=None, help="Asset cache (default: the project's).")
    args = parser.parse_args(argv)
    args.clients, args.sessions = (4, 40) if args.quick else (8, 150)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-rollout-") as tmp:
        procs, engines, router_ports, versions = start(Path(tmp), args.cache_dir)
        log(f"stack up after {time.monotonic() - t0:.1f} s")
        try:
            out = asyncio.run(rollout(args, engines, router_ports, versions))
        finally:
            for proc in reversed(procs):
                proc.stop()
    phases = out.pop("phases")
    print(f"{'step':<28}{'seconds':>10}")
    for name, seconds in phases.items():
        print(f"{name:<28}{seconds:>10.3f}")
    print(f"{'load → canary serving':<28}{out['load_to_serving_s']!s:>10}")
    print(f"{'rollback effective':<28}{out['rollback_effective_s']:>10.3f}")
    print(f"requests {out['requests']} (sessions {out['sessions']}, code route share {out['code_route_share']:.0%}), "
          f"failed {out['failed_requests']}, sessions that switched version {out['sessions_switched']}, "
          f"served by version {out['versions_served']}, base reloads {out['base_reloads']}")
    out["quick"] = args.quick
    out["total_s"] = round(time.monotonic() - t0, 1)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
