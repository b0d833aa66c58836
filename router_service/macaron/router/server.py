"""The router's gRPC server: wiring only (core, forwarder, guard, health, reflection, metrics, drain).

`serve(settings)` runs until SIGTERM or SIGINT, then drains as the specialists do: health turns
NOT_SERVING, new calls are refused, in-flight streams get `router.grace_period_s` to finish.
Health reports `macaron.v1.Router` (SERVING while up) and `macaron.v1.Router/store`
(NOT_SERVING while Redis is unreachable: the router still routes, degraded).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
import socket
from typing import Any

from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection

from macaron import telemetry
from macaron.auth import Guard, require_internal_token, resolve_dev_mode
from macaron.auth.tls import add_port, channel_credentials, channel_options
from macaron.config import MacaronSettings
from macaron.discovery import ReplicaSource, build_source
from macaron.grpc_admission import AdmissionInterceptor
from macaron.grpc_malformed import MalformedRequestInterceptor
from macaron.grpc_server import exclusive_server
from macaron.lifecycle.admin import add_admin_service
from macaron.ports import SPECIALISTS, metrics_port
from macaron.router.forwarder import ChannelFactory, Forwarder
from macaron.router.judge import Judge
from macaron.router.metrics import RouterMetrics
from macaron.router.routing import AdapterRef, ClassifierLike, RoutingCore
from macaron.router.servicer import RouterServicer
from macaron.router.store_gate import GatedStore
from macaron.store import Store, open_store
from macaron.v1 import router_pb2, router_pb2_grpc

log = logging.getLogger(__name__)
SERVICE_NAME = router_pb2.DESCRIPTOR.services_by_name["Router"].full_name
STORE_HEALTH_NAME = f"{SERVICE_NAME}/store"
UNSET: Any = object()


def pool_targets(settings: MacaronSettings) -> dict[str, list[str]]:
    """router.pools.<name>, else the specialist's port on loopback."""
    pools = settings.router.pools
    return {
        name: list(getattr(pools, name)) or [f"127.0.0.1:{settings.specialists.profile(name).port}"]
        for name in SPECIALISTS
    }


def replica_source(settings: MacaronSettings) -> ReplicaSource:
    """Kubernetes EndpointSlices when enabled, else router.discovery, else the specialists' discovery."""
    if settings.router.kubernetes.enabled:
        from macaron.discovery_k8s import EndpointSliceSource

        return EndpointSliceSource(settings.router.kubernetes)
    discovery = settings.router.discovery or settings.specialists.discovery
    return build_source(discovery, f"http://{settings.engine.host}:{settings.engine.port}")


def default_router_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(2)}"


def load_classifier(settings: MacaronSettings) -> ClassifierLike | None:
    """The fast classifier (macaron.router.classifier), or None when it cannot be loaded."""
    try:
        from macaron.router.classifier import SpecialistClassifier

        config = settings.classifier
        if config.escalation and not config.preload_embedder:  # a service: load MiniLM now, not on a request
            config = config.model_copy(update={"preload_embedder": True})
        return SpecialistClassifier.load(config)
    except Exception as exc:  # noqa: BLE001 - the router still routes (judge, then chat)
        log.warning("fast classifier unavailable (%s): unsure requests go to the judge", exc)
        return None


class RouterServer:
    """One router replica: grpc.aio server with health, reflection and metrics."""

    def __init__(
        self,
        settings: MacaronSettings,
        *,
        store: Store | None = None,
        cache_store: Store | None = None,
        classifier: ClassifierLike | None = UNSET,
        tokenizer: Any = None,
        discovery: ReplicaSource | None = None,
        policy: str | None = None,
        router_id: str | None = None,
        host: str | None = None,
        port: int | None = None,
        serve_metrics: bool | None = None,
        channel_factory: ChannelFactory | None = None,
    ) -> None:
        rs = settings.router
        self.settings = settings
        self.host = host or rs.host
        self.port = rs.port if port is None else port
        self.serve_metrics = rs.metrics if serve_metrics is None else serve_metrics
        self.metrics = RouterMetrics()
        self.health = health_aio.HealthServicer()
        backend = store if store is not None else open_store(settings.redis_url, timeout_s=settings.store_timeout_s)
        self.store = GatedStore(backend, retry_s=rs.store_retry_s, on_change=self._store_changed,
                                on_error=self.metrics.store_errors.inc)
        # Placement state (index, affinity, load) is evictable churn: its own store and breaker, so it can
        # never evict a session or a rate-limit window, and a full cache server degrades placement alone.
        if cache_store is None:
            cache_store = open_store(settings.cache_redis_url or settings.redis_url, timeout_s=settings.store_timeout_s,
                                     key_prefix="macaron:placement:")
        self.cache_store = GatedStore(cache_store, retry_s=rs.store_retry_s, on_error=self.metrics.store_errors.inc)
        dev_mode = resolve_dev_mode(settings.auth, self.host)
        internal_token = require_internal_token(settings.auth.internal_token_value, self.host, "router")
        self.guard = Guard(settings.auth, self.store, dev_mode=dev_mode)
        if tokenizer is None:
            from macaron.specialist.server import load_tokenizer

            tokenizer = load_tokenizer(settings)
        from macaron.specialist.profiles import load_profile

        profiles = {name: load_profile(settings.specialists, name) for name in SPECIALISTS}
        adapters = {n: AdapterRef(p.settings.adapter, p.settings.adapter_version or "") for n, p in profiles.items()}
        judge = Judge(tokenizer, profiles["chat"].lora_path, timeout_s=rs.judge_timeout_s, max_chars=rs.judge_max_chars,
                      api_key=settings.engine.api_key_value, history_turns=rs.judge_history_turns)
        self.core = RoutingCore(
            rs,
            store=self.store,
            cache_store=self.cache_store,
            profiles=profiles,
            adapters=adapters,
            tokenizer=tokenizer,
            discovery=discovery if discovery is not None else replica_source(settings),
            classifier=load_classifier(settings) if classifier is UNSET else classifier,
            judge=judge,
            router_id=router_id or rs.router_id or default_router_id(),
            metrics=self.metrics,
            policy=policy,
            engine_api_key=settings.engine.api_key_value,
        )
        self.forwarder = Forwarder(pool_targets(settings), max_attempts=rs.max_attempts,
                                   on_retry=lambda name, code: self.metrics.retries.labels(name).inc(),
                                   credentials=channel_credentials(rs.specialist_tls),
                                   channel_options=channel_options(rs.specialist_tls), internal_token=internal_token,
                                   channel_factory=channel_factory)
        admission = AdmissionInterceptor(rs.admission, {f"/{SERVICE_NAME}/Generate"}, registry=self.metrics.registry,
                                         metric_prefix="macaron_router")
        self.server = exclusive_server([admission, MalformedRequestInterceptor()])
        router_pb2_grpc.add_RouterServicer_to_server(
            RouterServicer(self.core, self.forwarder, self.guard, default_timeout_s=rs.default_timeout_s,
                           max_messages=settings.specialists.max_messages, max_tools=settings.specialists.max_tools),
            self.server,
        )
        admin = add_admin_service(self.server, self.core.versions.ops, rs.lifecycle, self.store, host=self.host)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, admin, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
            self.server,
        )
        self._metrics_server: Any = None
        self._tasks: set[asyncio.Task[Any]] = set()

    def _store_changed(self, degraded: bool) -> None:
        self.metrics.degraded.set(1 if degraded else 0)
        status = health_pb2.HealthCheckResponse.NOT_SERVING if degraded else health_pb2.HealthCheckResponse.SERVING
        task = asyncio.get_running_loop().create_task(self.health.set(STORE_HEALTH_NAME, status))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def start(self) -> int:
        """Binds and starts; returns the bound port (useful with port 0). Health turns SERVING once
        the classifier's embedding model (when it escalates) has loaded, so no request waits for it."""
        self.port = add_port(self.server, f"{self.host}:{self.port}", self.settings.router.tls)
        await self.server.start()
        await self.core.start()
        classifier = self.core.classifier
        if getattr(classifier, "escalation_enabled", False):
            embedders = [classifier.embedder]  # type: ignore[union-attr]
            for followup_embedder in getattr(classifier, "followup_embedders", ()):
                if followup_embedder is not classifier.embedder:  # type: ignore[union-attr]
                    embedders.append(followup_embedder)  # the frozen MiniLM the follow-up model reads (followup.py)
            if getattr(classifier, "second_encoder_enabled", False):
                embedders.append(classifier.base_embedder)  # type: ignore[union-attr]
            for embedder in embedders:
                embedder.start_loading()
            for embedder in embedders:
                if not await asyncio.to_thread(embedder.wait, self.settings.classifier.wait_for_embedder_s):
                    log.warning("the classifier's %s is not loaded yet: unsure requests go without it", embedder.name)
        if not await self.store.ping():
            log.warning("shared store does not answer: starting degraded")
            self.store.mark_unavailable("no answer at start")
        else:
            await self.health.set(STORE_HEALTH_NAME, health_pb2.HealthCheckResponse.SERVING)
        await self.health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        await self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        if self.serve_metrics:
            from prometheus_client import start_http_server

            self._metrics_server, _ = start_http_server(metrics_port(self.port), addr=self.host,
                                                        registry=self.metrics.registry)
        log.info("router serving on %s:%d (policy %s, id %s)", self.host, self.port, self.core.policy,
                 self.core.router_id)
        return self.port

    async def drain(self, grace_s: float) -> None:
        """NOT_SERVING, refuse new calls, let in-flight streams finish for up to `grace_s`, then stop."""
        await self.health.enter_graceful_shutdown()
        log.info("router draining (grace %.1f s)", grace_s)
        await self.server.stop(grace_s)
        await self.aclose()

    async def aclose(self) -> None:
        await self.server.stop(0)
        await self.core.aclose()
        await self.forwarder.close()
        await self.store.close()
        await self.cache_store.close()
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server = None


async def serve(settings: MacaronSettings) -> None:
    """Serves until SIGTERM/SIGINT, then drains."""
    telemetry.setup_tracing_from(settings.telemetry, "macaron-router")
    server = RouterServer(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await server.start()
        await stop.wait()
        await server.drain(settings.router.grace_period_s)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
