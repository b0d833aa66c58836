"""Benchmark of the L0 router, honest: decision latency on real prompts, the latency it adds, what placement buys.

    python loadtest/bench_router.py --quick    # small sizes, same shape (escalation on, paired TTFT, KV pressure)
    python loadtest/bench_router.py            # larger workload, more repeats

One run starts, on loopback: N embedded-engine replicas (`macaron engine`, the real default model
SmolLM2 unless --model says otherwise, four adapters) each with a KV cache smaller than the
workload's working set (--kv-tokens) and publishing KV-cache events (SGLang's format); the four
specialists over all of them; three `macaron router` processes (round_robin; two
prefix_affinity replicas A and B sharing a state Redis and a placement Redis of the bench's own),
all in the production configuration (classifier escalation on, judge on); and SGLang's router
`smg` (policy cache_aware, sticky on the same session ids) in two shapes: one instance, and two
instances joined with `--enable-mesh` (which syncs their trees), each started for its own arm and
stopped after it (two meshed instances keep most of a core busy even when idle). Then it measures:

1. classify: the fast classifier with escalation, as configured, on real prompts (dev.jsonl):
   p50/p99 and decisions per second on one thread;
2. route: a full routing decision in this process (RoutingCore: session read, classifier with
   escalation, judge when unsure, prompt rendering, tokenizing and hashing, one placement-store
   read, placement on the engines' KV-cache events) against the bench's Redis: p50/p99;
3. router-added TTFT, paired: each real prompt goes through router → specialist and straight to
   the same specialist and engine replica, in alternating order, both finding the whole prompt in
   that replica's KV cache (one unmeasured request straight to the specialist put it there), so the
   engine's work is the same on both paths; p50 and p99 of the per-pair difference, and where it
   goes (the router's own step times, the router → specialist hop, the caller → router hop);
   with --arm-b, router b runs other settings (or another checkout's code, via PYTHONPATH) and the
   pairs alternate between routers a and b, so both arms are measured in one run on one stack;
4. a multi-turn workload shaped like production, with KV pressure: each session forced to its
   specialist (so every arm serves it with the same adapter), each specialist's own profile prompt
   first, then the session's system prompt, as the specialists render it (the same text under two
   adapters is two KV-cache entries). Two shapes (--apps): by default the applications shape,
   production's (few applications, many users each): --apps applications (default 2), each with
   one long system prompt (--app-chars: instructions and tool definitions) and one specialist,
   session s belonging to application s % apps, so many sessions share one long head under one
   adapter; --apps 0, the mixed shape: 4 short system prompts shared across all four specialists,
   sessions sharing almost nothing. Each turn carries the whole growing history, fixed assistant turns of
   about 60 tokens so every arm sends the same requests with the same session ids; each engine's
   cache is 1.25 x its fair share of the working set (the unique tokens of every session's last request:
   a head shared under one adapter counted once), measured by tokenizing the workload first;
   plain text output everywhere. Measured: the prompt tokens the engines report served from
   their caches (`cached_tokens`) and mean TTFT for ours prefix_affinity, ours round_robin,
   smg cache_aware, two of ours (requests alternating between A and B) and two smg with
   --enable-mesh (alternating likewise). Each arm runs --repeats times, arms interleaved (the
   order rotates every round), every run with its own salt at the head of its system prompts,
   every run of ours on freshly started routers with no session counts or claims in the store (as
   smg is started for each of its runs; `--carry-sessions` keeps them running instead);
   medians and spreads are printed, ratios are of medians. `index_overclaim_share`: of our
   prefix_affinity turns, those where the router predicted more cached tokens than the engine
   reported. Each run's cached-token ceiling (`cached_ceiling`: the most any router could serve from
   cache on its requests, see `cached_ceiling()`) is printed with every arm's share of it, and
   `ceiling_over_smg` / `two_replica_ceiling_over_smg` say how far over smg any router could get, and
   `ceiling_over_rr` how far over round robin (under 2: the 2x target is out of reach on that shape).

Human-readable lines go to stderr; the last line on stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
SMG = Path(sys.executable).parent / "smg"
SPECIALISTS = ("chat", "agent", "code", "ui")
START_TIMEOUT_S = 300.0
SESSION_HEADER = "x-session-id"
UPSTREAM_TTFT_KEY = "x-macaron-upstream-ttft-ms"  # the router's trailer (macaron.router.servicer)
BLOCK_SIZE = 16
"""The engines' KV-cache block (the embedded engine's kv_block_size default): prefix reuse counts whole blocks."""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


# ---------------------------------------------------------------- processes


class Proc:
    """A child process in its own session with its log file; stop() ends its group."""

    def __init__(self, name: str, argv: list[str], workdir: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.log_path = workdir / f"{name}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env={**os.environ, **(env or {})}, cwd=str(REPO))

    def check(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{tail}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._log.close()


def macaron(name: str, args: list[str], workdir: Path, config: Path | None = None,
            env: dict[str, str] | None = None) -> Proc:
    argv = [sys.executable, "-m", "macaron.cli", *(["--config", str(config)] if config else []), *args]
    return Proc(name, argv, workdir, env={"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", **(env or {})})


def wait_http(proc: Proc, url: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        proc.check()
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{proc.name}: {url} did not answer in time")


def wait_grpc(proc: Proc, port: int, service: str, deadline: float) -> None:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    while time.monotonic() < deadline:
        proc.check()
        try:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                status = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=service), timeout=2).status
            if status == health_pb2.HealthCheckResponse.SERVING:
                return
        except grpc.RpcError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{proc.name}: {service} on {port} not serving in time")


def wait_smg(proc: Proc, url: str, n: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        proc.check()
        try:
            workers = httpx.get(url + "/workers", timeout=2.0).json().get("workers", [])
            if len([w for w in workers if w.get("is_healthy")]) >= n:
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{proc.name} did not register {n} workers in time")


@dataclass
class Stack:
    workdir: Path
    engines: list[str]
    specialist_ports: dict[str, int]
    routers: dict[str, int]
    smg: dict[str, str]
    redis_url: str
    config: Path
    model_dir: Path
    procs: list[Proc] = field(default_factory=list)
    cache_redis_url: str = ""
    """The placement store (load, spread counts, head claims, the KV-cache index)."""

    def stop(self) -> None:
        """SIGTERM to every process at once, then wait (SIGKILL after a grace period)."""
        for proc in self.procs:
            if proc.proc.poll() is None:
                try:
                    os.killpg(proc.proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for proc in reversed(self.procs):
            try:
                proc.stop()
            except Exception as exc:  # noqa: BLE001
                log(f"stopping {proc.name}: {exc}")


def smg_binary() -> list[str] | None:
    """The command that starts smg: its script next to this interpreter, else on PATH, else its module where
    this interpreter can import it (an environment whose packages are shared has no script of its own)."""
    if SMG.exists():
        return [str(SMG)]
    if shutil.which("smg"):
        return [str(shutil.which("smg"))]
    import importlib.util

    if importlib.util.find_spec("smg") is not None and importlib.util.find_spec("smg.cli") is not None:
        return [sys.executable, "-c", "import sys; from smg.cli import main; sys.argv[0] = 'smg'; sys.exit(main())"]
    return None


def redis(name: str, port: int, policy: str, workdir: Path) -> Proc:
    return Proc(name, ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                       "--maxmemory", "256mb", "--maxmemory-policy", policy], workdir)


def start_stack(args: argparse.Namespace, workdir: Path) -> Stack:
    from macaron.assets.builtin import ensure_builtin_model

    t0 = time.monotonic()
    assets = ensure_builtin_model(args.model, cache_dir=args.cache_dir, progress=False)
    procs: list[Proc] = []
    stack = Stack(workdir, [], {}, {}, {}, "", workdir / "macaron.yaml", assets.model_dir, procs)
    try:
        state_port, cache_port = free_port(), free_port()
        procs.append(redis("redis-state", state_port, "noeviction", workdir))
        procs.append(redis("redis-placement", cache_port, "allkeys-lru", workdir))
        stack.redis_url = f"redis://127.0.0.1:{state_port}/0"
        stack.cache_redis_url = f"redis://127.0.0.1:{cache_port}/0"
        lora = [f"{n}={p}" for n, p in assets.adapters.items()]
        engine_ports = [free_port() for _ in range(args.replicas)]
        events = json.dumps({"publisher": "zmq", "endpoint": "tcp://127.0.0.1:*"})
        for i, port in enumerate(engine_ports):
            procs.append(macaron(f"engine{i}", ["engine", "--host", "127.0.0.1", "--port", str(port), "--model-path",
                                                str(assets.model_dir), "--log-level", "warning",
                                                "--max-total-tokens", str(args.kv_tokens),
                                                "--kv-events-config", events, "--lora-paths", *lora], workdir))
        stack.engines = [f"http://127.0.0.1:{p}" for p in engine_ports]
        stack.specialist_ports = {n: free_port() for n in SPECIALISTS}
        stack.routers = {name: free_port() for name in ("rr", "a", "b")}
        config: dict[str, Any] = {
            "redis_url": stack.redis_url,
            "cache_redis_url": stack.cache_redis_url,
            "specialists": {
                "discovery": {"mode": "static", "urls": stack.engines},
                "tokenizer_path": str(assets.model_dir),
                **{n: {"port": p} for n, p in stack.specialist_ports.items()},
            },
            "router": {"pools": {n: [f"127.0.0.1:{p}"] for n, p in stack.specialist_ports.items()}, "metrics": False},
            "classifier": {"escalation": bool(args.escalation)},
        }
        if args.classifier_artifact:
            config["classifier"]["artifact_path"] = args.classifier_artifact
        stack.config.write_text(yaml.safe_dump(config))
        procs.append(macaron("specialists", ["specialist", "--name", "all"], workdir, stack.config))
        for name in stack.routers:
            procs.append(start_router(stack, name, args.arm_b))
        deadline = time.monotonic() + START_TIMEOUT_S
        for i, url in enumerate(stack.engines):
            wait_http(next(p for p in procs if p.name == f"engine{i}"), url + "/health", deadline)
        log(f"  engines up after {time.monotonic() - t0:.1f} s")
        if "placement" in args.parts and smg_binary():
            stack.smg = {"smg1": "", "smg2a": "", "smg2b": ""}  # started for their own arms only (start_smg)
        specialists = next(p for p in procs if p.name == "specialists")
        for port in stack.specialist_ports.values():
            wait_grpc(specialists, port, "macaron.v1.Specialist", deadline)
        for name, port in stack.routers.items():
            wait_grpc(next(p for p in procs if p.name == f"router-{name}"), port, "macaron.v1.Router", deadline)
        log(f"  stack up after {time.monotonic() - t0:.1f} s ({len(stack.engines)} engines of {args.kv_tokens} KV "
            f"tokens, 4 specialists, 3 routers; smg {'started for its arms' if stack.smg else 'not installed'})")
        return stack
    except BaseException:
        stack.stop()
        raise


SESSION_STATE_PATTERNS = ("*spread:*", "*kvpend:*")
"""Our routers' placement state that belongs to sessions: spread counts and pending head claims."""


def clear_session_state(stack: Stack) -> int:
    """Deletes our routers' session counts and head claims from the placement store. Without it (and the routers'
    restart, `fresh_routers`), an arm's counts hold the previous arm's ended sessions for up to 2 x
    `router.spread_window_s`, and whichever replicas they happened to leave emptiest take the next arm's first heads
    and their piles. The KV-cache index (what the engines hold) is left alone: it is engine truth, and the engines
    keep their caches between arms for every router alike."""
    import redis as redis_client

    client = redis_client.Redis.from_url(stack.cache_redis_url, socket_timeout=5)
    try:
        keys = [k for pattern in SESSION_STATE_PATTERNS for k in client.scan_iter(match=pattern, count=1000)]
        return client.delete(*keys) if keys else 0
    finally:
        client.close()


def start_router(stack: Stack, name: str, arm_b: dict[str, str] | None) -> Proc:
    """One of our routers ("rr": round robin; "a", "b": prefix affinity, sharing the placement store)."""
    policy = "round_robin" if name == "rr" else "prefix_affinity"
    return macaron(f"router-{name}", ["router", "--port", str(stack.routers[name]), "--policy", policy,
                                      "--router-id", f"bench-{name}"], stack.workdir, stack.config,
                   env=arm_b if name == "b" else None)


def fresh_routers(stack: Stack, names: list[str], arm_b: dict[str, str] | None) -> None:
    """Restarts our named routers and clears their session state in the placement store (`clear_session_state`),
    so an arm starts with no sessions counted anywhere, as smg's arms do. The engines, their caches and the
    KV-cache index they publish stay as they are, for every arm alike."""
    clear_session_state(stack)
    for name in names:
        old = next(p for p in stack.procs if p.name == f"router-{name}")
        old.stop()
        new = start_router(stack, name, arm_b)
        stack.procs[stack.procs.index(old)] = new
    deadline = time.monotonic() + START_TIMEOUT_S
    for name in names:
        wait_grpc(next(p for p in stack.procs if p.name == f"router-{name}"), stack.routers[name], "macaron.v1.Router",
                  deadline)


def start_smg(stack: Stack, names: list[str]) -> list[Proc]:
    """Starts the named smg instances (fresh ports; smg2a and smg2b joined with --enable-mesh) and waits until
    each sees every engine. Started for their own arms and stopped after them: two meshed smg instances keep
    most of a core busy even when idle, which would slow every other measurement on a small machine."""
    smg = smg_binary()
    assert smg is not None
    mesh_ports = {"smg2a": free_port(), "smg2b": free_port()}
    procs = []
    try:
        for name in names:
            port = free_port()
            argv = [*smg, "launch", "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *stack.engines,
                    "--policy", "cache_aware", "--prometheus-host", "127.0.0.1",
                    "--prometheus-port", str(free_port()), "--log-level", "warn",
                    "--worker-startup-check-interval", "1",
                    # the same session ids as our routers get, for sticky sessions on top of cache_aware
                    "--routing-key-override", "--routing-key-headers", SESSION_HEADER]
            if name != "smg1":  # smg's own multi-router mode: the two instances sync their trees
                argv += ["--enable-mesh", "--mesh-server-name", name, "--mesh-host", "127.0.0.1",
                         "--mesh-port", str(mesh_ports[name])]
                if name == "smg2b":
                    argv += ["--mesh-peer-urls", f"127.0.0.1:{mesh_ports['smg2a']}"]
            procs.append(Proc(f"{name}-{uuid.uuid4().hex[:4]}", argv, stack.workdir))
            stack.smg[name] = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + START_TIMEOUT_S
        for name, proc in zip(names, procs):
            wait_smg(proc, stack.smg[name], len(stack.engines), deadline)
        return procs
    except BaseException:
        for proc in procs:
            proc.stop()
        raise


# ---------------------------------------------------------------- workload


WORDS = ("harbour ledger invoice meeting archive customer policy refund schedule shipment warehouse contract "
         "quarterly budget summary request approval calendar reminder document report analysis forecast region "
         "office team project deadline priority note update review").split()
REPLIES = ("Understood. Here is a first summary of what I found, with the figures you asked for.",
           "Done. I compared both and listed the differences; three of them need your attention.",
           "Here is the revised version, shorter, with the open questions at the end.",
           "I checked the records again; the totals now match except for one entry.",
           "Noted. I added the reminder and moved the review to next week.")


def dev_prompts(limit: int, seed: int) -> list[str]:
    """Real prompts of the routing dev split (text rows, 20 to 600 characters), shuffled, repeated to `limit`."""
    from macaron.router.classifier.data import find_data_dir, load_jsonl

    rows = load_jsonl(find_data_dir(None) / "dev.jsonl")  # fails loudly: no made-up prompts
    texts = [r.text for r in rows if r.text and 20 <= len(r.text) <= 600]
    if not texts:
        raise SystemExit("dev.jsonl has no text prompts: point the classifier's data_dir at the routing data")
    random.Random(seed).shuffle(texts)
    return (texts * (limit // len(texts) + 1))[:limit]


def system_prompts(k: int, chars: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(k):
        sentences = []
        while sum(len(s) for s in sentences) < chars:
            sentences.append(f"Rule {len(sentences) + 1}: " + " ".join(rng.choices(WORDS, k=12)) + ".")
        out.append(f"You are the assistant of office {i}. " + " ".join(sentences))
    return out


@dataclass
class Turn:
    ttft_s: float
    prompt_tokens: int
    cached_tokens: int
    text: str
    predicted: int = -1
    """The router's predicted cached tokens (-1: no router prediction on this path)."""
    replica: str = ""
    reason: int = 0
    timing: dict[str, float] = field(default_factory=dict)
    """The router's step times (RouteTiming) and the specialist's TTFT as the router saw it; empty elsewhere."""


@dataclass
class RunResult:
    name: str
    turns: list[Turn] = field(default_factory=list)
    errors: int = 0
    by_session: dict[int, list[Turn]] = field(default_factory=dict)
    """Each session's turns in order (our routers report the replica; smg does not)."""
    ceiling: int = 0
    """The cached prompt tokens no router could beat on this run's requests (`cached_ceiling`)."""
    apps: int = 0
    """Applications of the workload (session s belongs to s % apps); 0: the mixed shape."""

    def spread(self) -> tuple[list[int], int] | None:
        """Sessions per replica (by their first turn, most first) and turns that changed replica within a
        session; None where the replica is not reported."""
        firsts = [ts[0].replica for ts in self.by_session.values() if ts and ts[0].replica]
        if not firsts:
            return None
        per = sorted((firsts.count(r) for r in set(firsts)), reverse=True)
        moves = sum(a.replica != b.replica for ts in self.by_session.values() for a, b in zip(ts, ts[1:]))
        return per, moves

    def heads(self) -> list[int] | None:
        """Applications whose sessions each replica serves (by their first turn, most first): how many times each
        application's head is prefilled; None where the replica is not reported or in the mixed shape."""
        if not self.apps:
            return None
        firsts = {s: ts[0].replica for s, ts in self.by_session.items() if ts and ts[0].replica}
        if not firsts:
            return None
        return sorted((len({s % self.apps for s, r in firsts.items() if r == replica}) for replica in set(firsts.values())),
                      reverse=True)

    @property
    def cached(self) -> int:
        return sum(t.cached_tokens for t in self.turns)

    @property
    def prompt(self) -> int:
        return sum(t.prompt_tokens for t in self.turns)

    @property
    def mean_ttft_ms(self) -> float:
        return statistics.fmean(t.ttft_s for t in self.turns) * 1000 if self.turns else float("nan")


class Senders:
    """Sends one chat turn through our router / a specialist (gRPC) or smg (HTTP /generate)."""

    def __init__(self, stack: Stack, max_new_tokens: int, tokenizer: Any) -> None:
        import grpc

        from macaron.config import load_settings
        from macaron.specialist.profiles import load_profile
        from macaron.v1 import router_pb2_grpc, specialist_pb2_grpc

        self.stack = stack
        self.max_new_tokens = max_new_tokens
        self.channels = {name: grpc.aio.insecure_channel(f"127.0.0.1:{port}") for name, port in stack.routers.items()}
        self.routers = {name: router_pb2_grpc.RouterStub(ch) for name, ch in self.channels.items()}
        spec_channels = {n: grpc.aio.insecure_channel(f"127.0.0.1:{p}") for n, p in stack.specialist_ports.items()}
        self.channels.update({f"spec-{n}": ch for n, ch in spec_channels.items()})
        self.specialists = {n: specialist_pb2_grpc.SpecialistStub(ch) for n, ch in spec_channels.items()}
        settings = load_settings(stack.config)
        self.profiles = {n: load_profile(settings.specialists, n) for n in SPECIALISTS}
        self.tokenizer = tokenizer
        self.http = httpx.AsyncClient(timeout=120.0)

    def proto(self, messages: list[dict[str, str]], *, specialist: str | None = None, session: str = "",
              hint: str = "") -> Any:
        """`specialist`: forced (None lets the router decide). Plain text output on every specialist (the ui
        one would otherwise constrain decoding to its schema, which smg's plain /generate path does not)."""
        from macaron.v1 import common_pb2 as pb

        roles = {"system": pb.ROLE_SYSTEM, "user": pb.ROLE_USER, "assistant": pb.ROLE_ASSISTANT}
        return pb.GenerateRequest(
            messages=[pb.ChatMessage(role=roles[m["role"]], content=m["content"]) for m in messages],
            session_id=session,
            specialist=SPECIALISTS.index(specialist) + 1 if specialist else pb.SPECIALIST_KIND_UNSPECIFIED,
            response_format=pb.ResponseFormat(type=pb.RESPONSE_FORMAT_TYPE_TEXT),
            sampling=pb.SamplingParams(max_new_tokens=self.max_new_tokens, temperature=0.0),
            engine_replica_hint=hint,
        )

    async def grpc_turn(self, stub: Any, request: Any) -> tuple[Turn, str]:
        start = time.perf_counter()
        ttft = None
        text, usage, specialist, route = [], None, "", None
        call = stub.Generate(request, timeout=180)
        async for chunk in call:
            if chunk.HasField("route") and route is None:
                route = chunk.route
                specialist = SPECIALISTS[max(0, chunk.route.specialist - 1)]
            if ttft is None and (chunk.text or chunk.tool_calls or chunk.HasField("finish")):
                ttft = time.perf_counter() - start
            text.append(chunk.text)
            if chunk.HasField("usage"):
                usage = chunk.usage
        assert ttft is not None and usage is not None and route is not None
        timing: dict[str, float] = {}
        if route.HasField("timing"):
            t = route.timing
            timing = {"admit_ms": t.admit_ms, "state_read_ms": t.state_read_ms, "classify_ms": t.classify_ms,
                      "judge_ms": t.judge_ms, "placement_ms": t.placement_ms, "route_ms": route.route_ms,
                      "servicer_ms": t.servicer_ms}
            trailers = dict(await call.trailing_metadata() or ())
            if UPSTREAM_TTFT_KEY in trailers:
                timing["upstream_ttft_ms"] = float(trailers[UPSTREAM_TTFT_KEY])
        return Turn(ttft, usage.prompt_tokens, usage.cached_tokens, "".join(text), route.predicted_cached_tokens,
                    route.replica, route.reason, timing), specialist

    async def smg_turn(self, url: str, messages: list[dict[str, str]], session: str, specialist: str) -> Turn:
        """The prompt exactly as `specialist` renders it, under its adapter: what our path sends the engine."""
        from macaron.prompting import ChatRequest, Message, render

        chat = ChatRequest(tuple(Message(m["role"], m["content"]) for m in messages))  # type: ignore[arg-type]
        profile = self.profiles[specialist]
        body = {"text": render(chat, profile, self.tokenizer), "lora_path": profile.lora_path,
                "sampling_params": {"max_new_tokens": self.max_new_tokens, "temperature": 0.0}, "stream": True}
        start = time.perf_counter()
        ttft = None
        last: dict[str, Any] = {}
        async with self.http.stream("POST", url + "/generate", json=body, headers={SESSION_HEADER: session}) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                if not line.startswith("data:") or line.strip() == "data: [DONE]":
                    continue
                if ttft is None:
                    ttft = time.perf_counter() - start
                last = json.loads(line[5:])
        meta = last.get("meta_info", {})
        return Turn(ttft or 0.0, int(meta.get("prompt_tokens", 0)), int(meta.get("cached_tokens", 0)),
                    str(last.get("text", "")))

    def ceiling(self, sessions: int, turns: int, systems: list[str], users: list[str], salt: str, apps: int) -> int:
        """`cached_ceiling` of one run's requests (its salt changes the tokens at the head of every prompt)."""
        from macaron.prompting import ChatRequest, Message, render

        requests = []
        for s in range(sessions):
            profile = self.profiles[session_specialist(s, systems, apps)]
            rows = []
            for messages in conversation(s, turns, systems, users, salt):
                chat = ChatRequest(tuple(Message(m["role"], m["content"]) for m in messages))  # type: ignore[arg-type]
                ids = self.tokenizer(render(chat, profile, self.tokenizer), add_special_tokens=False)["input_ids"]
                rows.append((profile.lora_path, ids))
            requests.append(rows)
        return cached_ceiling(requests, BLOCK_SIZE)

    async def reconnect(self, names: list[str]) -> None:
        """New channels to the named routers (after their restart: an old channel may still be backing off)."""
        import grpc

        from macaron.v1 import router_pb2_grpc

        for name in names:
            await self.channels[name].close()
            self.channels[name] = grpc.aio.insecure_channel(f"127.0.0.1:{self.stack.routers[name]}")
            self.routers[name] = router_pb2_grpc.RouterStub(self.channels[name])

    async def close(self) -> None:
        await self.http.aclose()
        for channel in self.channels.values():
            await channel.close()


def reply(s: int, t: int) -> str:
    """A fixed assistant turn (about 60 tokens, as long as a short real answer), the same in every arm."""
    return " ".join(REPLIES[(s + t + k) % len(REPLIES)] for k in range(3))


def session_specialist(s: int, systems: list[str], apps: int = 0) -> str:
    """Session `s`'s specialist.

    `apps` > 0 (the applications shape): session `s` belongs to application `s % apps`, and an application's
    sessions all reach one specialist (a coding tool's turns go to code, a support bot's to chat), cycling
    through the four by application: many sessions behind one long system prompt under one adapter.
    `apps` == 0 (the mixed shape): every shared system prompt is used by sessions of several specialists, so the
    same text reaches the engines under several adapters (separate KV-cache entries) and sessions share little."""
    if apps:
        return SPECIALISTS[(s % apps) % len(SPECIALISTS)]
    return SPECIALISTS[(s + s // len(systems)) % len(SPECIALISTS)]


def conversation(s: int, turns: int, systems: list[str], users: list[str], salt: str = "") -> list[list[dict[str, str]]]:
    """Session `s`'s requests, turn by turn: each carries the whole history (system, user, assistant, ...)."""
    messages = [{"role": "system", "content": f"[{salt}] {systems[s % len(systems)]}"}]
    out = []
    for t in range(turns):
        messages = [*messages, {"role": "user", "content": users[(s * turns + t) % len(users)]}]
        out.append(messages)
        messages = [*messages, {"role": "assistant", "content": reply(s, t)}]
    return out


def working_set(sessions: int, turns: int, systems: list[str], users: list[str], model_dir: Path, apps: int,
                block_size: int = BLOCK_SIZE) -> dict[str, int]:
    """Prompt tokens of the workload as each session's specialist renders it: the longest request, the sum over
    sessions of each one's last request (what the engines must hold at once to serve every next turn from cache),
    and `cached_ceiling`: the prompt tokens any router could serve from cache at best, with unlimited KV cache and
    every turn on the replica that holds the longest prefix of it (see `cached_ceiling`)."""
    from transformers import AutoTokenizer

    from macaron.config import load_settings
    from macaron.prompting import ChatRequest, Message, render
    from macaron.specialist.profiles import load_profile

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    settings = load_settings(None).specialists
    requests: list[list[tuple[str, list[int]]]] = []
    for s in range(sessions):
        profile = load_profile(settings, session_specialist(s, systems, apps))
        rows = []
        for messages in conversation(s, turns, systems, users, salt="0" * 12):
            chat = ChatRequest(tuple(Message(m["role"], m["content"]) for m in messages))  # type: ignore[arg-type]
            ids = tokenizer(render(chat, profile, tokenizer), add_special_tokens=False)["input_ids"]
            rows.append((profile.lora_path, ids))
        requests.append(rows)
    last = [len(rows[-1][1]) for rows in requests]
    return {"longest_request": max(last), "working_set": unique_tokens([rows[-1] for rows in requests]),
            "working_set_per_session": sum(last),
            "prompt_tokens": sum(len(ids) for rows in requests for _, ids in rows),
            "cached_ceiling": cached_ceiling(requests, block_size),
            # the part of it that comes from each session's own earlier turns: what any router that keeps every
            # session on one replica (and does not overfill a cache) gets; the rest is prompts shared across sessions
            "cached_ceiling_own_sessions": sum(cached_ceiling([rows], block_size) for rows in requests)}


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def unique_tokens(requests: list[tuple[str, list[int]]]) -> int:
    """Tokens a prefix cache must hold to keep all these requests at once: under one adapter, a prefix that
    several share (an application's head) is held once, so each request adds only what follows its longest
    common prefix with any other before it; under two adapters the same text is two entries."""
    total = 0
    for i, (adapter, ids) in enumerate(requests):
        shared = max((common_prefix(ids, other) for a, other in requests[:i] if a == adapter), default=0)
        total += len(ids) - shared
    return total


def cached_ceiling(requests: list[list[tuple[str, list[int]]]], block_size: int) -> int:
    """The most prompt tokens an engine's prefix cache could serve on this workload, whatever the router: each
    request, in turn order (every session's turn t before any session's turn t+1), reuses the longest prefix it
    shares with any earlier request under the same adapter, in whole blocks and short of its last token (as the
    engine's block manager counts `cached_tokens`), with unlimited KV cache. No placement can beat it, so the
    ratio over smg cannot exceed this ceiling over smg's own figure."""
    total = 0
    seen: dict[str, list[list[int]]] = {}
    for t in range(max(len(rows) for rows in requests)):
        for rows in requests:
            if t >= len(rows):
                continue
            adapter, ids = rows[t]
            best = 0
            for other in seen.get(adapter, ()):
                best = max(best, common_prefix(ids, other))
            total += min(best, len(ids) - 1) // block_size * block_size
            seen.setdefault(adapter, []).append(ids)
    return total


async def multi_turn(senders: Senders, name: str, targets: list[str], *, sessions: int, turns: int, systems: list[str],
                     users: list[str], concurrency: int, apps: int, trace: bool = False,
                     end_sessions: bool = False) -> RunResult:
    """Every session in its own task (at most `concurrency` turns in flight); requests alternate over targets.

    The assistant turns are fixed texts, so every arm sends exactly the same requests and session ids. `trace`:
    log every session's first turn in the order they were sent (target, replica, predicted and reported cached
    tokens), to see how a placement came about. `end_sessions`: a session sent through our routers ends with
    EndSession after its last turn, as a client that closes its conversations."""
    from macaron.v1 import router_pb2

    salt = uuid.uuid4().hex[:12]
    result = RunResult(name, ceiling=senders.ceiling(sessions, turns, systems, users, salt, apps), apps=apps)
    gate = asyncio.Semaphore(concurrency)
    counter = iter(range(10**9))
    started = time.perf_counter()
    firsts: list[tuple[float, int, str, Turn]] = []

    async def session(s: int) -> None:
        session_id = f"{salt}-{s}"
        specialist = session_specialist(s, systems, apps)
        for messages in conversation(s, turns, systems, users, salt):
            target = targets[next(counter) % len(targets)]
            async with gate:
                sent = time.perf_counter() - started
                try:
                    if target.startswith("http"):
                        turn = await senders.smg_turn(target, messages, session_id, specialist)
                    else:
                        turn, _ = await senders.grpc_turn(
                            senders.routers[target], senders.proto(messages, specialist=specialist, session=session_id))
                except Exception as exc:  # noqa: BLE001 - counted, the run goes on
                    result.errors += 1
                    log(f"  {name}: turn failed: {exc.__class__.__name__}: {str(exc)[:200]}")
                    return
            if s not in result.by_session:
                firsts.append((sent, s, target, turn))
            result.turns.append(turn)
            result.by_session.setdefault(s, []).append(turn)
        if end_sessions and not target.startswith("http"):
            try:
                await senders.routers[target].EndSession(router_pb2.EndSessionRequest(session_id=session_id), timeout=10)
            except Exception as exc:  # noqa: BLE001 - counted, the run goes on
                result.errors += 1
                log(f"  {name}: EndSession failed: {exc.__class__.__name__}: {str(exc)[:200]}")

    await asyncio.gather(*(session(s) for s in range(sessions)))
    rate = result.cached / result.prompt if result.prompt else 0.0
    spread = result.spread()
    where = f"  sessions per replica {spread[0]}, replica changes {spread[1]}" if spread else ""
    heads = result.heads()
    where += f", applications per replica {heads}" if heads else ""
    for sent, s, target, turn in sorted(firsts, key=lambda f: f[0]) if trace else ():
        app = f"application {s % apps}" if apps else f"specialist {session_specialist(s, systems, apps)}"
        log(f"    {sent:6.2f} s  session {s} ({app}) via {target if not target.startswith('http') else 'smg'}: "
            f"replica {turn.replica or '?'}, predicted {turn.predicted}, cached {turn.cached_tokens} of "
            f"{turn.prompt_tokens}, TTFT {turn.ttft_s * 1000:.0f} ms")
    log(f"  {name:<26} {len(result.turns):4d} turns  prompt {result.prompt:7d}  cached {result.cached:7d} "
        f"({rate:5.1%}; {result.cached / max(1, result.ceiling):5.1%} of the ceiling {result.ceiling})  "
        f"mean TTFT {result.mean_ttft_ms:7.1f} ms  errors {result.errors}{where}")
    return result


# ---------------------------------------------------------------- the measurements


class Preloaded:
    """The tokenizer and the classifier, loaded in a thread while the stack starts (not measured)."""

    def __init__(self, model_dir: Path) -> None:
        import threading

        self._done = threading.Event()
        self.tokenizer: Any = None
        self.classifier: Any = None
        self.error: BaseException | None = None
        threading.Thread(target=self._load, args=(model_dir,), daemon=True).start()

    def _load(self, model_dir: Path) -> None:
        try:
            from macaron.config import load_settings
            from macaron.router.server import load_classifier
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
            self.classifier = load_classifier(load_settings(None))
            if getattr(self.classifier, "escalation_enabled", False):  # steady state: its embedding model loaded
                self.classifier.embedder.wait(180)
        except BaseException as exc:  # noqa: BLE001 - reported by get()
            self.error = exc
        finally:
            self._done.set()

    def get(self) -> tuple[Any, Any]:
        self._done.wait()
        if self.error is not None:
            raise self.error
        if self.classifier is None:
            raise SystemExit("no classifier artifact: run `macaron router train` or pass --classifier-artifact")
        return self.tokenizer, self.classifier


def bench_classify(classifier: Any, n: int) -> dict[str, float]:
    """The classifier as the routers run it (escalation as configured) on real prompts, one thread."""
    texts = dev_prompts(n, seed=1)
    for text in texts[:20]:
        classifier.classify(messages=[{"role": "user", "content": text}])
    times = []
    start = time.perf_counter()
    for text in texts:
        t = time.perf_counter()
        classifier.classify(messages=[{"role": "user", "content": text}])
        times.append((time.perf_counter() - t) * 1000)
    wall = time.perf_counter() - start
    return {"classify_p50_ms": pct(times, 50), "classify_p99_ms": pct(times, 99), "decisions_per_s": len(texts) / wall}


async def bench_route(stack: Stack, n: int, systems: list[str], users: list[str], tokenizer: Any,
                      classifier: Any, profile: int = 0) -> dict[str, float]:
    """RoutingCore.route() in this process, production settings (judge on, KV-event index), the bench's Redis.
    `profile`: print that many functions of a cProfile of the measured routes, by own time (the profiler's
    overhead is in the route figures of such a run: use it to find where the time goes, not to compare)."""
    from macaron.config import load_settings
    from macaron.discovery import StaticSource
    from macaron.prompting import ChatRequest, Message
    from macaron.router.judge import Judge
    from macaron.router.routing import AdapterRef, RouteRequest, RoutingCore
    from macaron.router.store_gate import GatedStore
    from macaron.specialist.profiles import load_profile
    from macaron.store import RedisStore

    settings = load_settings(stack.config)
    rs = settings.router
    profiles = {n_: load_profile(settings.specialists, n_) for n_ in SPECIALISTS}
    tag = uuid.uuid4().hex[:6]
    store = GatedStore(RedisStore(stack.redis_url, key_prefix=f"bench-route-{tag}:"))
    cache = GatedStore(RedisStore(settings.cache_redis_url or stack.redis_url, key_prefix=f"bench-route-{tag}:"))
    judge = Judge(tokenizer, profiles["chat"].lora_path, timeout_s=rs.judge_timeout_s, max_chars=rs.judge_max_chars)
    core = RoutingCore(
        rs, store=store, cache_store=cache, profiles=profiles,
        adapters={k: AdapterRef(p.settings.adapter, p.settings.adapter_version or "") for k, p in profiles.items()},
        tokenizer=tokenizer, discovery=StaticSource(stack.engines),
        classifier=classifier, judge=judge, router_id="bench-core",
    )
    await core.start()
    times, decision, judged = [], [], 0
    steps: dict[str, list[float]] = {}
    profiler = None
    try:
        for i in range(n + 10):
            if i == 10 and profile:
                import cProfile

                profiler = cProfile.Profile()
                profiler.enable()
            s = i % 16
            history: list[Message] = [Message("system", systems[s % len(systems)])]
            for t in range(i // 16 % 4 + 1):
                history.append(Message("user", users[(s * 7 + t + i) % len(users)]))
                history.append(Message("assistant", REPLIES[t % len(REPLIES)]))
            history.pop()
            req = RouteRequest(ChatRequest(tuple(history)), owner="bench", session_id=f"route-{s}", request_id=str(i))
            route = await core.route(req)
            route.commit()
            route.release()
            if i >= 10:  # warm-up excluded
                times.append(route.route_ms)
                decision.append(route.decision_ms)
                judged += route.decision.reason in ("judge", "default")
                for key in ("state_read_ms", "classify_ms", "judge_ms", "placement_ms"):
                    steps.setdefault(key, []).append(getattr(route.times, key))
        if profiler is not None:
            profiler.disable()
            import io
            import pstats

            text = io.StringIO()
            stats = pstats.Stats(profiler, stream=text)
            stats.sort_stats("tottime").print_stats(profile)
            stats.sort_stats("cumulative").print_stats("macaron", profile)  # the project's own steps, inclusive
            log(f"  cProfile of {n} routes (own time; the event loop's idle wait is select/epoll):\n" + text.getvalue())
        await core.flush()
    finally:
        await core.aclose()
        await store.close()
        await cache.close()
    return {"route_p50_ms": pct(times, 50), "route_p99_ms": pct(times, 99), "decision_p50_ms": pct(decision, 50),
            "route_judged_share": judged / max(1, len(times)),
            "route_steps_p50_ms": {k: pct(v, 50) for k, v in steps.items()},
            "route_steps_p90_ms": {k: pct(v, 90) for k, v in steps.items()}}


async def bench_added_ttft(senders: Senders, n: int, users: list[str], classifier: Any,
                           arms: tuple[str, ...] = ("a",)) -> dict[str, Any]:
    """Paired: each prompt through router → specialist and straight to the same specialist and replica, the
    order alternating. Both paths send the same prompt and find it whole in the replica's KV cache (it went
    there once before, straight to the specialist, so the router saw nothing of it): the engine's work is the
    same on both, and the difference is the router's, not the noise of two prefills (hundreds of ms on shared
    CPUs). The specialist of the warm-up is this process's copy of the router's classifier; a pair where the
    router chose another specialist or replica is counted (`ttft_pairs_off_warm`).

    `arms`: the routers compared (("a", "b"): router b runs with `--arm-b`'s settings); pairs alternate between
    them in blocks of two, so each arm sees both orders. The first arm's figures are the main keys; each other
    arm's are under `arm_<name>`."""
    from macaron.v1 import common_pb2 as pb

    engines = senders.stack.engines
    pairs: dict[str, list[tuple[Turn, Turn, bool]]] = {arm: [] for arm in arms}
    off_warm: dict[str, int] = {arm: 0 for arm in arms}
    for i in range(n + 4 * len(arms)):
        arm = arms[(i // 2) % len(arms)]
        msgs = [{"role": "user", "content": f"(ref {uuid.uuid4().hex[:6]}) {users[i % len(users)]}"}]
        specialist = str(classifier.classify(messages=msgs).specialist)
        replica = engines[i % len(engines)]
        await senders.grpc_turn(senders.specialists[specialist], senders.proto(msgs, hint=replica))
        await asyncio.sleep(0.05)  # the engine's KV events reach the routers' index

        async def routed() -> tuple[Turn, str]:
            return await senders.grpc_turn(senders.routers[arm], senders.proto(msgs))

        async def straight() -> Turn:
            return (await senders.grpc_turn(senders.specialists[specialist],
                                            senders.proto(msgs, hint=replica)))[0]

        if i % 2 == 0:
            turn, chosen = await routed()
            plain = await straight()
        else:
            plain = await straight()
            turn, chosen = await routed()
        if i < 4 * len(arms):  # warm-up excluded
            continue
        off_warm[arm] += chosen != specialist or turn.replica.rstrip("/") != replica.rstrip("/")
        pairs[arm].append((turn, plain, turn.reason in (pb.ROUTE_REASON_JUDGE, pb.ROUTE_REASON_DEFAULT)))
    out = {**added_ttft_summary(pairs[arms[0]]), "ttft_pairs_off_warm": off_warm[arms[0]]}
    for arm in arms[1:]:
        out[f"arm_{arm}"] = {**added_ttft_summary(pairs[arm]), "ttft_pairs_off_warm": off_warm[arm]}
    return out


def added_ttft_summary(pairs: list[tuple[Turn, Turn, bool]]) -> dict[str, Any]:
    """The paired figures of one router's pairs: (routed turn, direct turn, whether the judge was asked)."""
    diffs = [(turn.ttft_s - plain.ttft_s) * 1000 for turn, plain, _ in pairs]
    plain_diffs = [d for d, (_, _, judged) in zip(diffs, pairs) if not judged]
    in_request = [turn.ttft_s * 1000 - turn.timing["upstream_ttft_ms"] for turn, _, _ in pairs
                  if "upstream_ttft_ms" in turn.timing]  # the caller's TTFT minus the specialist's as the router saw it
    parts: dict[str, list[float]] = {}
    for turn, plain, _ in pairs:
        for key, value in added_breakdown(turn, plain).items():
            parts.setdefault(key, []).append(value)
    return {
        "ttft_pairs": len(pairs),
        "added_breakdown_p50_ms": {k: pct(v, 50) for k, v in parts.items()},
        "added_breakdown_p99_ms": {k: pct(v, 99) for k, v in parts.items()},
        "judged_share": sum(j for _, _, j in pairs) / len(pairs),
        "ttft_cached_share": {"router": statistics.fmean(t.cached_tokens / max(1, t.prompt_tokens) for t, _, _ in pairs),
                              "direct": statistics.fmean(p.cached_tokens / max(1, p.prompt_tokens) for _, p, _ in pairs)},
        "router_ttft_p50_ms": pct([t.ttft_s * 1000 for t, _, _ in pairs], 50),
        "direct_ttft_p50_ms": pct([p.ttft_s * 1000 for _, p, _ in pairs], 50),
        "router_added_ttft_ms_p50": pct(diffs, 50),
        "router_added_ttft_ms_p99": pct(diffs, 99),
        "router_added_ttft_ms_p50_unjudged": pct(plain_diffs, 50) if plain_diffs else float("nan"),
        "router_added_ttft_ms_p50_in_request": pct(in_request, 50),
        "router_added_ttft_ms_p99_in_request": pct(in_request, 99),
    }


def added_breakdown(turn: Turn, plain: Turn) -> dict[str, float]:
    """One pair's added TTFT, step by step (ms): the router's own steps as it reports them (RouteTiming; steps
    that run side by side overlap), the router → specialist hop (the specialist's TTFT as the router saw it
    minus the direct path's TTFT: the same kind of hop as the caller's straight to the specialist, so this is
    mostly the two engine runs' noise), and the rest: the caller → router hop, the servicer's own work and
    relaying the first token back."""
    t = turn.timing
    if not t:
        return {}
    route_ms = t["route_ms"]
    upstream = t.get("upstream_ttft_ms", float("nan"))
    added = (turn.ttft_s - plain.ttft_s) * 1000
    outside_route = turn.ttft_s * 1000 - route_ms - upstream  # caller -> router hop, servicer, relay
    servicer = t.get("servicer_ms", float("nan"))
    return {
        "admit (limits, overlaps the decision)": t["admit_ms"],
        "state read (session, versions)": t["state_read_ms"],
        "classify (escalation included)": t["classify_ms"],
        "judge": t["judge_ms"],
        "placement (render, tokenize, hash, store read, scorers)": t["placement_ms"],
        "route total (decision + placement)": route_ms,
        "router -> specialist hop": upstream - plain.ttft_s * 1000,
        "caller -> router hop, servicer, relay": outside_route,
        "  of which the servicer (around the route)": servicer,
        "  of which gRPC's transit in and out": outside_route - servicer,
        "added (paired)": added,
    }


def summary(runs: list[RunResult]) -> dict[str, float]:
    cached = [r.cached for r in runs]
    ttft = [r.mean_ttft_ms for r in runs]
    of_ceiling = [r.cached / r.ceiling for r in runs if r.ceiling]
    return {"cached_median": statistics.median(cached), "cached_min": min(cached), "cached_max": max(cached),
            "ceiling_median": statistics.median(r.ceiling for r in runs),
            "of_ceiling_median": statistics.median(of_ceiling) if of_ceiling else float("nan"),
            "ttft_median_ms": statistics.median(ttft), "ttft_min_ms": min(ttft), "ttft_max_ms": max(ttft)}


def ratio(a: float, b: float) -> float | None:
    """a / b; None when b is 0 or either is not a number (no figure rather than a made-up one)."""
    if not b or a != a or b != b:
        return None
    return a / b


def clean(value: Any) -> Any:
    """JSON-safe: NaN becomes null, floats are rounded, containers are cleaned recursively."""
    if isinstance(value, float):
        return None if value != value else round(value, 4)
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value


async def measure(args: argparse.Namespace, stack: Stack, preloaded: Preloaded) -> dict[str, Any]:
    out: dict[str, Any] = {}
    tokenizer, classifier = preloaded.get()
    quick = args.quick
    systems = system_prompts(3 if quick else 4, 900 if quick else 1500, seed=7)
    users = list(dict.fromkeys(u[:300] for u in dev_prompts(800, seed=3)))

    if "classify" in args.parts:
        t = time.monotonic()
        log(f"classify (fast classifier, escalation {'on' if args.escalation else 'off'}, real prompts, this thread):")
        out.update(bench_classify(classifier, 300 if quick else 1000))
        log(f"  p50 {out['classify_p50_ms']:.3f} ms  p99 {out['classify_p99_ms']:.3f} ms  "
            f"{out['decisions_per_s']:.0f}/s  ({time.monotonic() - t:.1f} s)")

    if "route" in args.parts:
        t = time.monotonic()
        log("route (decision + placement, production settings, Redis round trips):")
        out.update(await bench_route(stack, 60 if quick else 500, systems, users, tokenizer, classifier,
                                     profile=args.profile))
        log(f"  p50 {out['route_p50_ms']:.3f} ms  p99 {out['route_p99_ms']:.3f} ms  "
            f"({out['route_judged_share']:.0%} asked the judge)  ({time.monotonic() - t:.1f} s)")
        log("  steps, p50 / p90 ms: " + ", ".join(f"{k[:-3]} {v:.2f} / {out['route_steps_p90_ms'][k]:.2f}"
                                                    for k, v in out["route_steps_p50_ms"].items()))

    senders = Senders(stack, args.max_new_tokens, tokenizer)
    try:
        if "ttft" in args.parts:
            await measure_ttft(args, senders, users, classifier, out)
        if "placement" in args.parts:
            await measure_placement(args, stack, senders, users, out)
    finally:
        await senders.close()
    return out


def cpu_seconds(proc: Proc) -> float:
    """User plus system CPU time a process has used so far (all its threads), from /proc; NaN where unreadable."""
    try:
        fields = Path(f"/proc/{proc.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure_ttft(args: argparse.Namespace, senders: Senders, users: list[str], classifier: Any,
                       out: dict[str, Any]) -> None:
    quick = args.quick
    t = time.monotonic()
    arms = ("a", "b") if args.arm_b else ("a",)
    routers = {arm: next(p for p in senders.stack.procs if p.name == f"router-{arm}") for arm in arms}
    cpu0 = {arm: cpu_seconds(proc) for arm, proc in routers.items()}
    log("router-added TTFT, paired (same prompt: router → specialist vs the specialist and replica it chose)"
        + (f"; router a (as configured) and router b ({', '.join(f'{k}={v}' for k, v in args.arm_b.items())}) "
           "alternating:" if args.arm_b else ":"))
    out.update(await bench_added_ttft(senders, args.pairs or (8 if quick else 80), users[400:], classifier, arms))
    wall = time.monotonic() - t
    log(f"  ({wall:.1f} s)")
    # each router's CPU over the part: both serve the same number of requests, so a difference is their own
    # background work (polling the engines, heartbeats), which lands on the same cores as the requests
    for arm, proc in routers.items():
        cpu = cpu_seconds(proc) - cpu0[arm]
        (out if arm == arms[0] else out[f"arm_{arm}"])["router_cpu_s"] = cpu
        log(f"  router {arm}: {cpu:.2f} s of CPU over the part's {wall:.0f} s")
    for arm in arms:
        log_added_ttft(f"router {arm}", out if arm == arms[0] else out[f"arm_{arm}"])


def log_added_ttft(name: str, r: dict[str, Any]) -> None:
    log(f"  {name} ({r['ttft_pairs']} pairs): via router p50 {r['router_ttft_p50_ms']:.1f} ms, direct p50 "
        f"{r['direct_ttft_p50_ms']:.1f} ms, paired difference p50 {r['router_added_ttft_ms_p50']:.1f} ms p99 "
        f"{r['router_added_ttft_ms_p99']:.1f} ms ({r['judged_share']:.0%} went to the judge; p50 without them "
        f"{r['router_added_ttft_ms_p50_unjudged']:.1f} ms)")
    log(f"    within each routed request (its TTFT minus the specialist's TTFT as the router saw it: the caller -> "
        f"router hop, the router's work, the relay; no second prefill in it): p50 "
        f"{r['router_added_ttft_ms_p50_in_request']:.1f} ms p99 {r['router_added_ttft_ms_p99_in_request']:.1f} ms")
    log(f"    prompt share served from cache: via router {r['ttft_cached_share']['router']:.0%}, direct "
        f"{r['ttft_cached_share']['direct']:.0%}; pairs where the router left the warm specialist or replica: "
        f"{r['ttft_pairs_off_warm']}")
    log("    where the added time goes (per pair; p50 / p99 ms; the router's steps overlap where it runs them "
        "side by side):")
    for key, p50 in r["added_breakdown_p50_ms"].items():
        log(f"      {key:<58} {p50:8.2f} / {r['added_breakdown_p99_ms'][key]:8.2f}")


async def measure_placement(args: argparse.Namespace, stack: Stack, senders: Senders, users: list[str],
                            out: dict[str, Any]) -> None:
    quick = args.quick
    t = time.monotonic()
    shape = dict(sessions=args.sessions, turns=args.turns, systems=args.work_systems, users=users,
                 concurrency=4 if quick else 8, apps=args.apps)
    arms: dict[str, list[str]] = {"ours round_robin": ["rr"], "ours prefix_affinity": ["a"]}
    if stack.smg:
        arms.update({"smg cache_aware x1": ["smg1"], "ours prefix_affinity x2": ["a", "b"],
                     "smg cache_aware x2 mesh": ["smg2a", "smg2b"]})
    else:
        log("  smg is not installed (pip install smg): no comparison with SGLang's router")
    if args.arms:
        wanted = [a.strip() for a in args.arms.split(",") if a.strip()]
        unknown = [a for a in wanted if a not in arms]
        if unknown:
            raise SystemExit(f"--arms: unknown arm(s) {unknown}; the arms are {list(arms)}")
        arms = {a: arms[a] for a in wanted}
    what = (f"{args.apps} applications of {args.app_chars}-character system prompts, each application's sessions on "
            "one specialist" if args.apps else f"mixed shape: {len(args.work_systems)} shared system prompts across "
            "specialists")
    log(f"multi-turn workload ({shape['sessions']} sessions x {shape['turns']} turns, {what}, working set {args.sizes['working_set']} tokens, {len(stack.engines)} engines of "
        f"{args.kv_tokens} KV tokens; {args.repeats} rounds, arms interleaved):")
    runs: dict[str, list[RunResult]] = {name: [] for name in arms}
    names = list(arms)
    for round_ in range(args.repeats):
        order = names[round_ % len(names):] + names[:round_ % len(names)]
        for name in order:
            smg = [t_ for t_ in arms[name] if t_.startswith("smg")]
            procs = start_smg(stack, smg) if smg else []
            if any(t_ in ("a", "b") for t_ in arms[name]) and not args.carry_sessions:
                # both, whichever the arm uses: a router left running republishes its sessions with its load
                await asyncio.to_thread(fresh_routers, stack, ["a", "b"], args.arm_b)
                await senders.reconnect(["a", "b"])
            try:
                targets = [stack.smg[t_] if t_ in smg else t_ for t_ in arms[name]]
                runs[name].append(await multi_turn(senders, name, targets, trace=args.trace,
                                                   end_sessions=args.end_sessions, **shape))
            finally:
                for proc in procs:
                    proc.stop()
    stats = {name: summary(rs) for name, rs in runs.items()}
    for name, st in stats.items():
        log(f"  {name:<26} cached median {st['cached_median']:.0f} [{st['cached_min']:.0f}..{st['cached_max']:.0f}]"
            f" ({st['of_ceiling_median']:.0%} of the ceiling)  mean TTFT median {st['ttft_median_ms']:.0f} ms "
            f"[{st['ttft_min_ms']:.0f}..{st['ttft_max_ms']:.0f}]")
    def median_of(arm: str, key: str) -> float | None:
        return stats[arm][key] if arm in stats else None  # an arm left out by --arms: its ratios are None

    def ratio_of(a: str, b: str, key: str = "cached_median") -> float | None:
        x, y = median_of(a, key), median_of(b, key)
        return ratio(x, y) if x is not None and y is not None else None

    aff, one_smg, two_smg = "ours prefix_affinity", "smg cache_aware x1", "smg cache_aware x2 mesh"
    out["affinity_cached_tokens_over_rr"] = ratio_of(aff, "ours round_robin")
    out["affinity_ttft_over_rr"] = ratio_of(aff, "ours round_robin", "ttft_median_ms")
    out["cached_ceiling_median"] = statistics.median(r.ceiling for rs in runs.values() for r in rs)
    # the best any router could do over round robin on these requests: where this is under 2, the 2x target is
    # out of reach on this shape whatever the router does (round robin already finds the shared heads cached)
    rr_median = median_of("ours round_robin", "cached_median")
    out["ceiling_over_rr"] = ratio(out["cached_ceiling_median"], rr_median) if rr_median is not None else None
    out["cached_tokens_over_smg"] = ratio_of(aff, one_smg)
    out["two_replica_cached_tokens_over_smg"] = ratio_of("ours prefix_affinity x2", two_smg)
    if stack.smg:
        # the best any router could do over smg on these requests: the ceiling over smg's own cached tokens
        out["ceiling_over_smg"] = (ratio(out["cached_ceiling_median"], stats[one_smg]["cached_median"])
                                   if one_smg in stats else None)
        out["two_replica_ceiling_over_smg"] = (ratio(out["cached_ceiling_median"], stats[two_smg]["cached_median"])
                                               if two_smg in stats else None)
        out["ttft_over_smg"] = ratio_of(aff, one_smg, "ttft_median_ms")
    ours = [t_ for name in ("ours prefix_affinity", "ours prefix_affinity x2") for r in runs.get(name, [])
            for t_ in r.turns]
    out["index_overclaim_share"] = (sum(t_.predicted > t_.cached_tokens for t_ in ours) / len(ours)) if ours else None
    out["arms"] = stats
    out["arms_spread"] = {name: [{"sessions_per_replica": sp[0], "replica_changes": sp[1],
                                  "applications_per_replica": r.heads()} for r, sp in ((r, r.spread()) for r in rs) if sp]
                          for name, rs in runs.items() if rs[0].spread()}
    out["cache_hit_rate"] = {name: round(sum(r.cached for r in rs) / max(1, sum(r.prompt for r in rs)), 4)
                             for name, rs in runs.items()}
    out["workload_errors"] = sum(r.errors for rs in runs.values() for r in rs)
    out["workload"] = {**{k: v for k, v in shape.items() if k in ("sessions", "turns", "concurrency", "apps")},
                       "app_chars": args.app_chars if args.apps else None,
                       "repeats": args.repeats, "carry_sessions": bool(args.carry_sessions), "end_sessions": bool(args.end_sessions), "kv_tokens": args.kv_tokens, **args.sizes}
    log(f"  ({time.monotonic() - t:.1f} s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Smaller sizes, the same shape (escalation stays on).")
    parser.add_argument("--model", choices=("smollm2", "tiny", "bench"), default="smollm2",
                        help="Built-in model the engine replicas serve (default: smollm2, the real default model).")
    parser.add_argument("--replicas", type=int, default=4, help="Embedded-engine replicas (default 4, at least 4 "
                        "for the comparison the issue asks for).")
    parser.add_argument("--kv-tokens", type=int, default=0,
                        help="KV-cache tokens per engine (default: 1.25 x the workload's working set (the unique tokens of the "
                        "sessions' last requests, a shared head once per adapter) / replicas, "
                        "at least its longest request: a router that spreads the sessions evenly and keeps each on "
                        "one replica can serve every next turn from cache; one that does not, cannot).")
    parser.add_argument("--sessions", type=int, default=0, help="Sessions of the multi-turn workload (default 9, "
                        "or 25 without --quick: not a multiple of the replica count, so round robin cannot land a "
                        "session's turns on one replica by accident when sessions advance in step).")
    parser.add_argument("--apps", type=int, default=2,
                        help="Applications of the multi-turn workload (default 2): each has one long system prompt "
                        "(--app-chars, as a real application's instructions and tool definitions are) and its own "
                        "specialist, and session s belongs to application s %% apps, so many sessions share one long "
                        "head under one adapter. Production has few applications with many users each, hence few "
                        "applications and several sessions each by default. 0: the mixed shape (4 short system prompts "
                        "shared across specialists, sessions sharing almost nothing under one adapter).")
    parser.add_argument("--app-chars", type=int, default=0,
                        help="Characters of each application's system prompt (default 2000, or 6000 without --quick; "
                        "about 5 characters a token).")
    parser.add_argument("--turns", type=int, default=0, help="Turns per session (default 5, or 8 without --quick).")
    parser.add_argument("--pairs", type=int, default=0, help="Prompts of the paired router-added TTFT (default 8, "
                        "or 80 without --quick; 4 more warm up).")
    parser.add_argument("--repeats", type=int, default=3, help="Runs of each multi-turn arm (default 3).")
    parser.add_argument("--max-new-tokens", type=int, default=8, help="Output tokens per turn (default 8).")
    parser.add_argument("--cache-dir", default=None, help="Asset cache (default: $MACARON_CACHE_DIR or ~/.cache/macaron).")
    parser.add_argument("--classifier-artifact", default=None, help="Classifier artifact (default: the configured one).")
    parser.add_argument("--escalation", action=argparse.BooleanOptionalAction, default=True,
                        help="The classifier escalates to its embedding model when unsure, as in production (default).")
    parser.add_argument("--keep", action="store_true", help="Keep the work directory (logs, config).")
    parser.add_argument("--parts", default="classify,route,ttft,placement",
                        help="Comma-separated parts to measure (default: all): classify, route, ttft (router-added "
                        "TTFT, paired, with its breakdown), placement (the multi-turn arms); smg starts only for "
                        "placement.")
    parser.add_argument("--arms", default="", help="Comma-separated multi-turn arms to run (default: all; e.g. "
                        "'ours prefix_affinity x2' to study one): the ratios of arms left out are not reported.")
    parser.add_argument("--trace", action="store_true", help="Log every session's first turn of each multi-turn run "
                        "in the order sent: target, replica, predicted and reported cached tokens.")
    parser.add_argument("--carry-sessions", action="store_true", help="Keep our routers running, with their session "
                        "counts and head claims, from one multi-turn arm to the next (by default they are restarted "
                        "and their session state cleared before each of their arms, as smg is started for each of "
                        "its own); shows what ended sessions still counted do to placement.")
    parser.add_argument("--end-sessions", action="store_true", help="Each session sent through our routers ends with "
                        "EndSession after its last turn (a client that closes its conversations): with "
                        "--carry-sessions, shows whether ended sessions still weigh on the next arm's placement.")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="The route part prints the N functions of a cProfile of its routes with the most own "
                        "time (the profiler slows the routes it measures: for finding, not comparing).")
    parser.add_argument("--arm-b", action="append", default=[], metavar="ENV=VALUE",
                        help="Runs router b with this environment setting (repeatable; a MACARON_ setting, e.g. "
                        "MACARON_ROUTER__LIFECYCLE__USAGE_COALESCE_S=0, or PYTHONPATH to run another checkout's "
                        "code): the ttft part then alternates its pairs between router a (as configured) and "
                        "router b, in one run on one stack.")
    args = parser.parse_args(argv)
    if any("=" not in a or not (a.startswith("MACARON_") or a.startswith("PYTHONPATH=")) for a in args.arm_b):
        parser.error("--arm-b takes MACARON_...=VALUE or PYTHONPATH=... settings")
    args.arm_b = dict(a.split("=", 1) for a in args.arm_b)
    if args.replicas < 1:
        parser.error("--replicas must be at least 1")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    args.parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    if not args.parts or args.parts - {"classify", "route", "ttft", "placement"}:
        parser.error("--parts: a comma-separated subset of classify, route, ttft, placement")
    if shutil.which("redis-server") is None:
        parser.error("redis-server is not on PATH")
    if args.classifier_artifact:
        os.environ["MACARON_CLASSIFIER__ARTIFACT_PATH"] = args.classifier_artifact
    os.environ["MACARON_CLASSIFIER__ESCALATION"] = "true" if args.escalation else "false"
    args.cache_dir = args.cache_dir or os.environ.get("MACARON_CACHE_DIR") or None
    if args.cache_dir is None:
        from macaron.assets.settings import default_cache_dir

        args.cache_dir = default_cache_dir()
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="bench-router-"))
    log(f"bench_router ({'quick' if args.quick else 'full'}), work dir {workdir}")
    from macaron.assets.builtin import ensure_builtin_model

    model_dir = ensure_builtin_model(args.model, cache_dir=args.cache_dir, progress=False).model_dir
    args.sessions = args.sessions or (9 if args.quick else 25)
    args.turns = args.turns or (5 if args.quick else 8)
    if args.apps < 0:
        parser.error("--apps must be 0 (the mixed shape) or more")
    args.app_chars = args.app_chars or (2000 if args.quick else 6000)
    args.work_systems = system_prompts(args.apps, args.app_chars, seed=13) if args.apps else system_prompts(4, 250, seed=11)
    users = list(dict.fromkeys(u[:300] for u in dev_prompts(800, seed=3)))
    args.sizes = working_set(args.sessions, args.turns, args.work_systems, users, model_dir, args.apps)
    if not args.kv_tokens:
        args.kv_tokens = max(args.sizes["longest_request"] + args.max_new_tokens + 64,
                             int(1.25 * args.sizes["working_set"] / args.replicas))
    log(f"multi-turn cached-token ceiling {args.sizes['cached_ceiling']} of {args.sizes['prompt_tokens']} prompt tokens "
        f"({args.sizes['cached_ceiling_own_sessions']} of it from each session's own history)")
    log(f"multi-turn working set {args.sizes['working_set']} unique tokens of the sessions' last requests (a shared "
        f"head once per adapter; {args.sizes['working_set_per_session']} counting every session's copy of it; longest "
        f"request {args.sizes['longest_request']}); "
        f"{args.replicas} engines of {args.kv_tokens} KV tokens ({args.replicas * args.kv_tokens} in all)")
    if args.kv_tokens >= args.sizes["working_set"]:
        log("  note: one engine holds the whole working set: no KV pressure, placement cannot matter much")
    preloaded = Preloaded(model_dir)
    stack = start_stack(args, workdir)
    try:
        results = asyncio.run(measure(args, stack, preloaded))
    finally:
        t = time.monotonic()
        stack.stop()
        log(f"stack stopped in {time.monotonic() - t:.1f} s")
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    results["load_avg_1m"] = round(os.getloadavg()[0], 2)
    results["cpu_count"] = os.cpu_count()
    results["replicas"] = args.replicas
    results["model"] = args.model
    results["classifier_escalation"] = args.escalation
    results["wall_s"] = round(time.monotonic() - started, 1)
    log(f"done in {results['wall_s']} s")
    print(json.dumps(clean(results)))
    return 0


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    """SIGTERM (a timeout, `kill`) unwinds like Ctrl-C, so the stack's engines and routers are stopped, not orphaned."""
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    sys.exit(main())
