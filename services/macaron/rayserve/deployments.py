"""The Serve deployments: thin wrappers around the same classes `macaron serve` runs.

| deployment | wraps | reached by |
|---|---|---|
| `Gateway` (HTTP ingress) | `macaron.gateway.app.create_app`, its SDK client on a `ServeChannel` | Serve's HTTP proxy |
| `Router` | `macaron.router.server.RouterServer` on loopback, behind a `GrpcRelay` | the gateway's SDK (router.proto) |
| `Specialist-<name>` | `macaron.specialist.server.SpecialistServer` on loopback, behind a `GrpcRelay` | the router's forwarder (specialist.proto) |
| `Engine` | the embedded engine's SGLang-native HTTP server | specialists and the router's judge, by URL |
| `EngineDirectory` | `macaron.rayserve.directory.EngineDirectory` | engine replicas renew, discovery reads |

Each replica builds its component in an async constructor and drains it in `__del__`, which Serve
calls when it removes the replica (after the replica's ongoing requests ended or
`graceful_shutdown_timeout_s` passed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, AsyncIterator

from ray import serve

from macaron.config import MacaronSettings
from macaron.rayserve.directory import EngineDirectory
from macaron.rayserve.relay import GrpcRelay, Metadata, ServeChannel
from macaron.serve import LOOPBACK, _Server, _until_started, _wait, bind_socket

log = logging.getLogger(__name__)


@serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 0})
class EngineDirectoryDeployment(EngineDirectory):
    """One replica: the application's engine directory."""


class _Relayed:
    """A replica whose gRPC server is reached through relay_unary / relay_stream."""

    _relay: GrpcRelay

    async def relay_unary(self, method: str, request: bytes, metadata: Metadata, timeout_s: float | None) -> tuple[Any, ...]:
        return await self._relay.unary(method, request, metadata, timeout_s)

    async def relay_stream(self, method: str, request: bytes, metadata: Metadata,
                           timeout_s: float | None) -> AsyncIterator[tuple[Any, ...]]:
        async for item in self._relay.stream(method, request, metadata, timeout_s):
            yield item


@serve.deployment
class EngineDeployment:
    """One base-weight replica: the embedded engine and its HTTP server, registered in the directory."""

    async def __init__(self, settings: MacaronSettings, directory: Any, bind_host: str, renew_s: float) -> None:
        import uvicorn

        from macaron.engine.async_engine import AsyncLLMEngine
        from macaron.engine.http_server import create_app

        args = settings.engine
        updates: dict[str, Any] = {"host": bind_host}
        if args.model_path is None:
            from macaron.assets.builtin import ensure_builtin_model

            assets = await asyncio.to_thread(ensure_builtin_model, args.builtin_model, settings.assets.cache_dir, False)
            updates["model_path"] = str(assets.model_dir)
            if not args.lora_paths:
                updates["lora_paths"] = [f"{name}={path}" for name, path in assets.adapters.items()]
        sock = bind_socket(bind_host, 0)
        updates["port"] = sock.getsockname()[1]
        args = args.model_copy(update=updates)
        engine = await asyncio.to_thread(AsyncLLMEngine.from_args, args)
        config = uvicorn.Config(create_app(engine, args), log_level=args.log_level, lifespan="on", access_log=False,
                                log_config=None, timeout_graceful_shutdown=5)
        self._server = _Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="macaron-engine")
        await _until_started(self._server, self._task, "engine")
        self.url = f"http://{_advertised(bind_host)}:{args.port}"
        self._directory, self._renew_s = directory, renew_s
        await directory.register.remote(self.url, 3 * renew_s)
        self._renewing = asyncio.create_task(self._renew(), name="macaron-engine-renew")
        log.info("engine replica serving at %s", self.url)

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self._renew_s)
            try:
                await self._directory.register.remote(self.url, 3 * self._renew_s)
            except Exception as exc:  # noqa: BLE001 - the next renewal tries again
                log.warning("engine %s could not renew its directory entry: %r", self.url, exc)

    def address(self) -> str:
        """This replica's URL (the SGLang native API)."""
        return self.url

    def check_health(self) -> None:
        if self._task.done():
            raise RuntimeError(f"the engine server at {self.url} stopped")

    async def __del__(self) -> None:
        if not hasattr(self, "_renewing"):  # Serve calls __del__ after a failed constructor too
            return
        self._renewing.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._directory.unregister.remote(self.url), 2.0)
        self._server.should_exit = True
        await _wait(self._task, 15, "engine")


@serve.deployment
class SpecialistDeployment(_Relayed):
    """One specialist replica: the profile's pipeline and gRPC server (loopback), relayed."""

    async def __init__(self, settings: MacaronSettings, name: str) -> None:
        from macaron.specialist.server import SpecialistServer, build_pipelines

        self._settings = settings
        pipelines = await asyncio.to_thread(build_pipelines, settings, [name])
        self._pipeline = pipelines[name]
        self._server = SpecialistServer(self._pipeline, LOOPBACK, 0, serve_metrics=False,
                                        internal_token=settings.auth.internal_token_value)
        port = await self._server.start()
        self._relay = GrpcRelay(f"{LOOPBACK}:{port}")

    async def __del__(self) -> None:
        if hasattr(self, "_relay"):  # Serve calls __del__ after a failed constructor too
            await self._server.drain(self._settings.specialists.grace_period_s)
            await self._relay.close()
            await self._pipeline.engines.aclose()


@serve.deployment
class RouterDeployment(_Relayed):
    """One router replica: RouterServer (loopback) whose pools are the specialist deployments' handles.

    `engines` is the engine deployment's handle: unused for calls (placement reaches engines by URL),
    it keeps the engines in the application, since Serve deploys what the ingress's graph reaches.
    """

    async def __init__(self, settings: MacaronSettings, specialists: dict[str, Any], engines: Any) -> None:
        from macaron.router.forwarder import SERVE_PREFIX
        from macaron.router.server import RouterServer, load_classifier
        from macaron.specialist.server import load_tokenizer

        self._settings = settings
        self._engines = engines
        # The tokenizer first: the classifier may import sentence-transformers in a thread of its own,
        # and two threads importing transformers at once can see it half-initialised.
        tokenizer = await asyncio.to_thread(load_tokenizer, settings)
        classifier = await asyncio.to_thread(load_classifier, settings)

        def channel(target: str) -> ServeChannel:
            return ServeChannel(specialists[target.removeprefix(SERVE_PREFIX)])

        self._server = RouterServer(settings, classifier=classifier, tokenizer=tokenizer, host=LOOPBACK, port=0,
                                    serve_metrics=False, channel_factory=channel)
        port = await self._server.start()
        self._relay = GrpcRelay(f"{LOOPBACK}:{port}")

    async def __del__(self) -> None:
        if hasattr(self, "_relay"):  # Serve calls __del__ after a failed constructor too
            await self._server.drain(self._settings.router.grace_period_s)
            await self._relay.close()


@serve.ingress()
class GatewayIngress:
    """The OpenAI-compatible gateway as Serve's HTTP ingress; its SDK client reaches the router deployment."""

    def __init__(self, settings: MacaronSettings, router: Any) -> None:
        self._settings = settings
        self._router = router

    def __serve_build_asgi_app__(self) -> Any:
        from macaron.gateway.app import create_app
        from macaron.sdk import AsyncMacaronClient

        gs = self._settings.gateway
        client = AsyncMacaronClient(
            gs.router_target, channel=ServeChannel(self._router), api_key="", timeout=gs.router_timeout_s,
            max_retries=gs.router_max_retries, retry_rate_limits=False,
        )
        return create_app(self._settings, client=client)


GatewayDeployment = serve.deployment(GatewayIngress)


def _advertised(bind_host: str) -> str:
    """The address others reach a replica at: the node's IP when bound to every interface."""
    if bind_host in ("0.0.0.0", "::", ""):
        import ray

        return ray.util.get_node_ip_address()
    return f"[{bind_host}]" if ":" in bind_host else bind_host
