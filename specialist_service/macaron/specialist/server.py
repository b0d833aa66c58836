"""gRPC servers for specialist profiles: wiring only (servicer, health, reflection, drain).

`serve(settings, names)` runs one server per named profile in this process (the embedded
stack hosts all four, each on its own port) until SIGTERM or SIGINT, then drains: health
turns NOT_SERVING, new calls are refused, in-flight streams get `grace_period_s` to finish,
and the process exits.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path
from typing import Any

from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection

from macaron.auth import InternalTokenInterceptor, ServerTlsSettings, require_internal_token
from macaron.auth.tls import add_port
from macaron.config import MacaronSettings
from macaron.discovery import build_source
from macaron.grpc_malformed import MalformedRequestInterceptor
from macaron.grpc_server import exclusive_server
from macaron.ports import metrics_port
from macaron.specialist.generation import EnginePool, Pipeline
from macaron.specialist.metrics import SpecialistMetrics
from macaron.specialist.profiles import Profile, load_profile
from macaron.specialist.replicas import ReplicaPicker
from macaron.specialist.servicer import SpecialistServicer
from macaron.v1 import specialist_pb2, specialist_pb2_grpc

log = logging.getLogger(__name__)
SERVICE_NAME = specialist_pb2.DESCRIPTOR.services_by_name["Specialist"].full_name


def tokenizer_dir(settings: MacaronSettings) -> Path:
    """specialists.tokenizer_path, else engine.model_path, else the built-in model's directory."""
    path = settings.specialists.tokenizer_path or settings.engine.model_path
    if path:
        return Path(path)
    from macaron.assets.builtin import ensure_builtin_model

    return ensure_builtin_model(settings.engine.builtin_model, settings.assets.cache_dir, progress=False).model_dir


def load_tokenizer(settings: MacaronSettings) -> Any:
    """The tokenizer (with its chat template) prompts are rendered and counted with.

    From tokenizer.json and the chat template alone when the model has them (no transformers, so
    no torch in this process: a specialist or router replica starts in a second, not tens), else
    through transformers."""
    from macaron.prompting.tokenizer import load_light_tokenizer

    folder = tokenizer_dir(settings)
    light = load_light_tokenizer(folder)
    if light is not None:
        return light
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def build_pipelines(settings: MacaronSettings, names: list[str], tokenizer: Any | None = None) -> dict[str, Pipeline]:
    """One pipeline per profile, sharing the tokenizer, the replica picker and the engine clients."""
    spec = settings.specialists
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(settings)
    default_url = f"http://{settings.engine.host}:{settings.engine.port}"
    picker = ReplicaPicker(build_source(spec.discovery, default_url))
    engines = EnginePool(api_key=settings.engine.api_key_value)
    profiles = {name: load_profile(spec, name) for name in names}
    for profile in profiles.values():
        check_output_budget(profile)
    return {name: Pipeline(profile, spec, tokenizer, picker, engines) for name, profile in profiles.items()}


def check_output_budget(profile: Profile) -> int:
    """The longest answer the profile's default grammar admits, in bytes (0: none); warns when its
    default max_new_tokens could cut one (a token is at least one byte). Builds the grammar's schema
    now, so a bad `specialists.a2ui` fails at start, not on the first request."""
    kind = profile.settings.output_schema
    if kind == "none":
        return 0
    if kind == "a2ui":
        from macaron.a2ui.grammar import max_output_bytes

        bound = max_output_bytes(profile.a2ui)
    else:
        from macaron.specialist.ui_schema import max_output_bytes as ui_bytes

        bound = ui_bytes()
    if profile.settings.max_new_tokens < bound:
        log.warning(
            "specialist %s: max_new_tokens %d is under the %d bytes its longest %s answer takes; answers may be cut "
            "(finish_reason length). Raise specialists.%s.max_new_tokens or lower the specialists.a2ui bounds.",
            profile.name, profile.settings.max_new_tokens, bound, kind, profile.name,
        )
    return bound


class SpecialistServer:
    """One profile's grpc.aio server with health and reflection; TLS and the internal token when configured.

    Bound to a non-loopback address it refuses to start without the internal token (InsecureBindError):
    otherwise whoever reaches the port would skip every key and limit the router enforces.
    """

    def __init__(
        self,
        pipeline: Pipeline,
        host: str,
        port: int,
        serve_metrics: bool = True,
        metrics_port: int | None = None,
        *,
        internal_token: str | None = None,
        tls: ServerTlsSettings | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.host = host
        self.port = port
        self.tls = tls or ServerTlsSettings()
        token = require_internal_token(internal_token, host, f"{pipeline.profile.name} specialist")
        configured = pipeline.profile.settings.metrics_port
        self.metrics_port = metrics_port if metrics_port is not None else configured
        self.serve_metrics = serve_metrics and self.metrics_port != 0
        self.metrics = SpecialistMetrics(pipeline.profile.name)
        self._metrics_server: Any = None
        interceptors = [InternalTokenInterceptor(token)] if token else []
        self.server = exclusive_server([*interceptors, MalformedRequestInterceptor()])
        self.health = health_aio.HealthServicer()
        specialist_pb2_grpc.add_SpecialistServicer_to_server(SpecialistServicer(pipeline, self.metrics), self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
            self.server,
        )

    async def start(self) -> int:
        """Binds and starts; returns the bound port (useful with port 0)."""
        self.port = add_port(self.server, f"{self.host}:{self.port}", self.tls)
        await self.server.start()
        await self.health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        if self.serve_metrics:
            self._start_metrics()
        log.info("specialist %s serving on %s:%d%s", self.pipeline.profile.name, self.host, self.port,
                 " (TLS)" if self.tls.enabled else "")
        return self.port

    def _start_metrics(self) -> None:
        """Prometheus text on metrics_port (default: the gRPC port + 1000); a taken port is logged, never fatal."""
        from prometheus_client import start_http_server

        port = self.metrics_port or metrics_port(self.port)
        try:
            self._metrics_server, _ = start_http_server(port, addr=self.host, registry=self.metrics.registry)
            log.info("specialist %s metrics on http://%s:%d/metrics", self.pipeline.profile.name, self.host, port)
        except OSError as exc:
            log.warning("specialist %s: metrics port %d unavailable (%s); metrics not served", self.pipeline.profile.name, port, exc)

    async def drain(self, grace_s: float) -> None:
        """NOT_SERVING, refuse new calls, let in-flight streams finish for up to `grace_s`, then stop."""
        await self.health.enter_graceful_shutdown()
        log.info("specialist %s draining (%d in flight, grace %.1f s)", self.pipeline.profile.name, self.pipeline.active, grace_s)
        await self.server.stop(grace_s)
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server = None


async def serve(settings: MacaronSettings, names: list[str], ports: dict[str, int] | None = None) -> None:
    """Serves `names` until SIGTERM/SIGINT, then drains every server together."""
    from macaron import telemetry

    telemetry.setup_tracing_from(settings.telemetry, "macaron-specialist")
    pipelines = build_pipelines(settings, names)
    spec = settings.specialists
    servers = [
        SpecialistServer(p, spec.host, (ports or {}).get(name, p.profile.settings.port),
                         internal_token=settings.auth.internal_token_value, tls=spec.tls)
        for name, p in pipelines.items()
    ]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        for server in servers:
            await server.start()
        await stop.wait()
        log.info("stop signal: draining %d specialist server(s)", len(servers))
        await asyncio.gather(*(s.drain(spec.grace_period_s) for s in servers))
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await next(iter(pipelines.values())).engines.aclose()
