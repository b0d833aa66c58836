"""`macaron serve`: the embedded stack, the whole of Macaron Serve in one process.

Starts, in one asyncio loop: the embedded engine (converting the built-in model on first use, with
a progress bar), the four specialists, the L0 router and the REST gateway; prints the URLs and
a ready-to-paste curl; on Ctrl-C or SIGTERM drains in reverse order (gateway first, engine
last) and exits 0.

- Store: Redis when `redis_url` (or `$REDIS_URL`) is set, else an in-process store.
- Ports: the gateway listens on gateway.host:gateway.port (8080; `--port 0` takes any free
  one) and fails clearly when it is taken. The internal services (engine, specialists, router)
  bind loopback and, with serve.free_ports, take a free port when their default is taken, so
  two stacks run side by side (the second one with another `--port`).
- Auth: on a loopback gateway without API keys the stack runs in dev mode and says so; on any
  other address it refuses to start without auth.api_keys.

Importing this module stays light (pydantic only): the configuration imports ServeSettings.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from macaron.config import MacaronSettings

log = logging.getLogger(__name__)
LOOPBACK = "127.0.0.1"
REDIS_URL_ENV = "REDIS_URL"


class ServeSettings(BaseModel):
    """`macaron serve`: how the embedded stack starts."""

    model_config = ConfigDict(extra="forbid")

    free_ports: bool = Field(
        True,
        description="Internal services (engine, specialists, router) take a free loopback port when their "
        "configured one is taken, so two stacks can run side by side.",
    )
    startup_timeout_s: float = Field(300.0, description="Longest wait for every component to be ready.")
    progress: bool = Field(True, description="Show a progress bar while the built-in model is prepared (first run only).")
    kv_events: bool = Field(
        True,
        description="The embedded engine publishes its KV-cache events on a free loopback port (unless "
        "`engine.kv_events_config` says otherwise), so the router places on what the engine really caches.",
    )


class PortInUseError(RuntimeError):
    """A port that must be used as configured is taken."""


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    """True when nothing listens on host:port (a plain bind, without SO_REUSEPORT, succeeds)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def choose_port(preferred: int, *, fallback: bool, host: str = LOOPBACK, what: str = "service") -> int:
    """`preferred` if free; else 0 (let the server pick) when fallback is allowed; else PortInUseError."""
    if preferred and port_is_free(preferred, host):
        return preferred
    if fallback or preferred == 0:
        if preferred:
            log.info("%s: port %d is taken; using a free one", what, preferred)
        return 0
    raise PortInUseError(f"{what}: port {preferred} on {host} is taken")


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening-ready TCP socket on host:port (port 0: any free one), as uvicorn binds."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


@dataclass
class Endpoints:
    """Where each component of a running stack listens."""

    gateway_url: str
    router_target: str
    engine_url: str
    specialists: dict[str, str] = field(default_factory=dict)
    dev_mode: bool = True
    store: str = "in-process"
    playground: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {
            "gateway_url": self.gateway_url,
            "router_target": self.router_target,
            "engine_url": self.engine_url,
            "specialists": self.specialists,
            "dev_mode": self.dev_mode,
            "store": self.store,
            "playground_url": f"{self.gateway_url}/" if self.playground else None,
        }


def curl_example(gateway_url: str, dev_mode: bool) -> str:
    body = json.dumps({"model": "macaron-auto", "messages": [{"role": "user", "content": "Hello! What can you do?"}]})
    auth = "" if dev_mode else ' -H "Authorization: Bearer $MACARON_API_KEY"'
    return f"curl {gateway_url}/v1/chat/completions -H 'Content-Type: application/json'{auth} -d '{body}'"


def banner(e: Endpoints) -> str:
    """What `macaron serve` prints once everything is ready."""
    mode = "DEV MODE: no API keys configured, auth is off (loopback only)" if e.dev_mode else "API keys required"
    specialists = ", ".join(f"{name} {target}" for name, target in e.specialists.items())
    lines = [
        "",
        f"Macaron Serve is ready ({mode}).",
        *([f"  playground (browser)         {e.gateway_url}/"] if e.playground else []),
        f"  gateway (OpenAI-compatible)  {e.gateway_url}/v1",
        f"  OpenAPI docs                 {e.gateway_url}/docs",
        f"  router (gRPC SDK)            {e.router_target}",
        f"  specialists (gRPC)           {specialists}",
        f"  engine (SGLang native API)   {e.engine_url}",
        f"  store                        {e.store}",
        "",
        "Try it:",
        f"  {curl_example(e.gateway_url, e.dev_mode)}",
        "",
        "Press Ctrl-C to stop.",
        "",
    ]
    return "\n".join(lines)


class EmbeddedStack:
    """Engine, four specialists, router and gateway in this process's event loop."""

    def __init__(self, settings: MacaronSettings) -> None:
        self.settings = settings
        self.endpoints: Endpoints | None = None
        self._engine_server: Any = None
        self._engine_task: asyncio.Task[None] | None = None
        self._specialists: list[Any] = []
        self._pipelines: dict[str, Any] = {}
        self._router: Any = None
        self._gateway_server: Any = None
        self._gateway_task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ start

    async def start(self) -> Endpoints:
        """Starts every component; raises (after stopping what started) when one cannot start."""
        from macaron.auth import resolve_dev_mode

        s = self.settings
        dev_mode = resolve_dev_mode(s.auth, s.gateway.host)  # refuse an open non-loopback gateway first
        gateway_sock = self._gateway_socket()
        try:
            async with asyncio.timeout(s.serve.startup_timeout_s):
                engine_url = await self._start_engine()
                specialists = await self._start_specialists(engine_url)
                router_target = await self._start_router(engine_url, specialists)
                gateway_url = await self._start_gateway(router_target, gateway_sock)
        except BaseException:
            gateway_sock.close()
            await self.stop()
            raise
        store = "Redis " + _redact(s.redis_url) if s.redis_url else "in-process (set REDIS_URL to share state in Redis)"
        self.endpoints = Endpoints(gateway_url, router_target, engine_url, specialists, dev_mode, store,
                                   playground=self.settings.gateway.playground)
        return self.endpoints

    def _gateway_socket(self) -> socket.socket:
        gs = self.settings.gateway
        try:
            return bind_socket(gs.host, gs.port)
        except OSError as exc:
            raise PortInUseError(
                f"the gateway cannot listen on {gs.host}:{gs.port} ({exc.strerror}); "
                "pass --port N for another port, or --port 0 for any free one"
            ) from None

    async def _start_engine(self) -> str:
        import uvicorn

        from macaron.engine.async_engine import AsyncLLMEngine
        from macaron.engine.http_server import create_app

        s = self.settings
        args = s.engine
        updates: dict[str, Any] = {"host": LOOPBACK}
        if args.model_path is None:
            from macaron.assets.builtin import ensure_builtin_model, newest_versions

            print(f"Preparing the {args.builtin_model} model (built once, then cached) ...", file=sys.stderr, flush=True)
            assets = await asyncio.to_thread(ensure_builtin_model, args.builtin_model, s.assets.cache_dir, s.serve.progress)
            updates["model_path"] = str(assets.model_dir)
            if not args.lora_paths:
                updates["lora_paths"] = [f"{name}={path}" for name, path in assets.adapters.items()]
                self._serve_newest_versions(newest_versions(assets.adapters))
                s = self.settings
        if s.serve.kv_events and not args.kv_events_config:  # loopback only; the router reads it from server info
            updates["kv_events_config"] = json.dumps({"publisher": "zmq", "endpoint": f"tcp://{LOOPBACK}:*"})
        port = choose_port(args.port, fallback=s.serve.free_ports, what="engine")
        sock = bind_socket(LOOPBACK, port)
        updates["port"] = sock.getsockname()[1]
        args = args.model_copy(update=updates)
        self.settings = s = s.model_copy(update={"engine": args})
        engine = await asyncio.to_thread(AsyncLLMEngine.from_args, args)
        config = uvicorn.Config(
            create_app(engine, args), log_level=args.log_level, lifespan="on", access_log=False, log_config=None,
            timeout_graceful_shutdown=5,
        )
        self._engine_server = _Server(config)
        self._engine_task = asyncio.create_task(self._engine_server.serve(sockets=[sock]), name="macaron-engine")
        await _until_started(self._engine_server, self._engine_task, "engine")
        url = f"http://{LOOPBACK}:{args.port}"
        log.info("engine ready at %s", url)
        return url

    def _serve_newest_versions(self, versions: dict[str, str]) -> None:
        """Profiles that name no adapter version serve the newest one the built-in model ships (ui@v2);
        the older ones stay loaded, so `macaron adapters canary|promote` can move between them."""
        spec = self.settings.specialists
        updates = {
            name: spec.profile(name).model_copy(update={"adapter_version": version})
            for name, version in versions.items()
            if spec.profile(name).adapter_version is None
        }
        if updates:
            self.settings = self.settings.model_copy(update={"specialists": spec.model_copy(update=updates)})

    async def _start_specialists(self, engine_url: str) -> dict[str, str]:
        from macaron.ports import SPECIALISTS
        from macaron.specialist.server import SpecialistServer, build_pipelines

        s = self.settings
        spec = s.specialists.model_copy(
            update={
                "host": LOOPBACK,
                "discovery": s.specialists.discovery.model_copy(update={"mode": "static", "urls": [engine_url]}),
                "tokenizer_path": s.specialists.tokenizer_path or s.engine.model_path,
            }
        )
        self.settings = s = s.model_copy(update={"specialists": spec})
        self._pipelines = await asyncio.to_thread(build_pipelines, s, list(SPECIALISTS))
        targets: dict[str, str] = {}
        for name, pipeline in self._pipelines.items():
            configured = spec.profile(name).port
            port = choose_port(configured, fallback=s.serve.free_ports, what=f"specialist {name}")
            # Metrics only on the fixed layout: a stack moved to free ports must not take a neighbour's port.
            server = SpecialistServer(pipeline, LOOPBACK, port, serve_metrics=port == configured,
                                      internal_token=s.auth.internal_token_value)
            self._specialists.append(server)
            targets[name] = f"{LOOPBACK}:{await server.start()}"
        return targets

    async def _start_router(self, engine_url: str, specialists: dict[str, str]) -> str:
        from macaron.ports import metrics_port
        from macaron.router.server import RouterServer, load_classifier

        s = self.settings
        rs = s.router
        pools = rs.pools.model_copy(update={name: [target] for name, target in specialists.items()})
        port = choose_port(rs.port, fallback=s.serve.free_ports, what="router")
        rs = rs.model_copy(update={"host": LOOPBACK, "port": port, "pools": pools})
        self.settings = s = s.model_copy(update={"router": rs})
        classifier = await asyncio.to_thread(load_classifier, s)  # may load a model: off the loop
        tokenizer = next(iter(self._pipelines.values())).tokenizer
        self._router = RouterServer(
            s, classifier=classifier, tokenizer=tokenizer,
            serve_metrics=rs.metrics and bool(port) and port_is_free(metrics_port(port)),
        )
        bound = await self._router.start()
        return f"{LOOPBACK}:{bound}"

    async def _start_gateway(self, router_target: str, sock: socket.socket) -> str:
        from macaron.gateway.server import build_server

        s = self.settings
        host, port = sock.getsockname()[:2]
        gateway = s.gateway.model_copy(update={"router_target": router_target, "port": port})
        self.settings = s = s.model_copy(update={"gateway": gateway})
        self._gateway_server = build_server(s, install_signal_handlers=False)
        self._gateway_task = asyncio.create_task(self._gateway_server.serve(sockets=[sock]), name="macaron-gateway")
        await _until_started(self._gateway_server, self._gateway_task, "gateway")
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}"

    # ------------------------------------------------------------ stop

    async def stop(self) -> None:
        """Drains in reverse order: gateway (in-flight streams finish), router, specialists, engine."""
        s = self.settings
        if self._gateway_server is not None and self._gateway_task is not None:
            self._gateway_server.begin_drain()
            await _wait(self._gateway_task, s.gateway.grace_period_s + 5, "gateway")
            self._gateway_server = None
        if self._router is not None:
            with _logged("router"):
                await self._router.drain(s.router.grace_period_s)
            self._router = None
        if self._specialists:
            with _logged("specialists"):
                await asyncio.gather(*(server.drain(s.specialists.grace_period_s) for server in self._specialists))
            self._specialists = []
        if self._pipelines:
            with _logged("engine clients"):
                await next(iter(self._pipelines.values())).engines.aclose()
            self._pipelines = {}
        if self._engine_server is not None and self._engine_task is not None:
            self._engine_server.should_exit = True
            await _wait(self._engine_task, 15, "engine")
            self._engine_server = None


def _Server(config: Any) -> Any:  # noqa: N802 - reads like a class
    """A uvicorn.Server without its own signal handlers (the stack owns SIGINT/SIGTERM)."""
    import uvicorn

    server = uvicorn.Server(config)
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign]
    return server


async def _until_started(server: Any, task: asyncio.Task[None], what: str) -> None:
    while not server.started:
        if task.done():
            exc = task.exception()
            raise RuntimeError(f"the {what} failed to start: {exc or 'it exited'}") from exc
        await asyncio.sleep(0.05)


async def _wait(task: asyncio.Task[None], timeout: float, what: str) -> None:
    try:
        await asyncio.wait_for(asyncio.shield(task), timeout)
    except (asyncio.TimeoutError, TimeoutError):
        log.warning("%s did not stop within %.0f s; cancelling it", what, timeout)
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
    except BaseException as exc:  # noqa: BLE001 - shutting down: log and go on
        log.warning("%s stopped with %r", what, exc)


@contextlib.contextmanager
def _logged(what: str) -> Any:
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - shutting down: log and go on
        log.warning("stopping %s failed: %r", what, exc)


def _redact(url: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@")
    return url


def with_env_redis(settings: MacaronSettings) -> MacaronSettings:
    """`$REDIS_URL` fills redis_url when the configuration sets none (as the README promises)."""
    if not settings.redis_url and os.environ.get(REDIS_URL_ENV):
        return settings.model_copy(update={"redis_url": os.environ[REDIS_URL_ENV]})
    return settings


async def serve(settings: MacaronSettings, *, on_ready: Any = None) -> None:
    """Runs the stack until SIGINT/SIGTERM, then stops it cleanly."""
    from macaron import telemetry

    telemetry.setup_tracing_from(settings.telemetry, "macaron")
    stack = EmbeddedStack(with_env_redis(settings))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        starting = asyncio.create_task(stack.start())
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait({starting, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            print("Stopping before the stack was ready ...", file=sys.stderr, flush=True)
            starting.cancel()
            with contextlib.suppress(BaseException):
                await starting
            await stack.stop()
            return
        stopper.cancel()
        endpoints = starting.result()
        print(banner(endpoints), flush=True)
        if on_ready is not None:
            on_ready(endpoints)
        await stop.wait()
        print("Stopping: letting in-flight requests finish ...", file=sys.stderr, flush=True)
        await stack.stop()
        print("Macaron Serve stopped.", file=sys.stderr, flush=True)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
