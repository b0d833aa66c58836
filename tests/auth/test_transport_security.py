"""Every hop behind the gateway holds its own door: the engine's key, the internal token, TLS.

The real chain on loopback: the SDK over TLS → the router (TLS server) → a specialist (TLS
server, mutual TLS, internal token) → the embedded engine (bearer key, tiny model). Each door
is also tried from the wrong side: no token, a wrong token, no client certificate, an
untrusted CA, a plain-text client.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest

from auth.certs import Certs, make_certs
from engine_api.servers import ThreadedServer
from macaron.auth import InsecureBindError, ServerTlsSettings
from macaron.config import MacaronSettings
from macaron.discovery import StaticSource
from macaron.sdk import AsyncMacaronClient, AuthenticationError
from macaron.v1 import specialist_pb2, specialist_pb2_grpc

ENGINE_KEY = "engine-secret-key"
INTERNAL_TOKEN = "internal-shared-token"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def keyed_engine(macaron_cache_dir: Path) -> Iterator[ThreadedServer]:
    """The embedded engine with an API key (tiny model, its four adapters)."""
    from macaron.assets import ensure_tiny_model
    from macaron.engine.args import EngineArgs
    from macaron.engine.async_engine import AsyncLLMEngine
    from macaron.engine.http_server import create_app

    tiny = ensure_tiny_model(cache_dir=macaron_cache_dir, progress=False)
    args = EngineArgs(model_path=str(tiny.model_dir), lora_paths=[f"{n}={p}" for n, p in tiny.adapters.items()],
                      max_running_requests=2, log_level="warning", api_key=ENGINE_KEY)
    server = ThreadedServer(create_app(AsyncLLMEngine.from_args(args), args)).start()
    server.model_dir = tiny.model_dir  # type: ignore[attr-defined]
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tokenizer(keyed_engine: ThreadedServer):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(keyed_engine.model_dir))  # type: ignore[attr-defined]


def _settings(engine_url: str, certs: Certs, specialist_port: int = 0, **auth) -> MacaronSettings:
    return MacaronSettings(
        engine={"api_key": ENGINE_KEY},
        auth={"internal_token": INTERNAL_TOKEN, **auth},
        specialists={"discovery": {"mode": "static", "urls": [engine_url]}, "chat": {"port": specialist_port},
                     "tls": {"cert_file": str(certs.server_cert), "key_file": str(certs.server_key),
                             "client_ca_file": str(certs.ca)}},
        router={"metrics": False, "specialist_tls": {"ca_file": str(certs.ca), "cert_file": str(certs.client_cert),
                                                     "key_file": str(certs.client_key)},
                "tls": {"cert_file": str(certs.server_cert), "key_file": str(certs.server_key)}},
    )


@pytest.fixture
async def specialist(keyed_engine: ThreadedServer, certs: Certs, tokenizer) -> AsyncIterator[object]:
    from macaron.specialist.server import SpecialistServer, build_pipelines

    settings = _settings(keyed_engine.url, certs)
    pipeline = build_pipelines(settings, ["chat"], tokenizer)["chat"]
    server = SpecialistServer(pipeline, "127.0.0.1", 0, serve_metrics=False, internal_token=INTERNAL_TOKEN,
                              tls=settings.specialists.tls)
    await server.start()
    yield server
    await server.server.stop(0)
    await pipeline.engines.aclose()


def _specialist_channel(port: int, certs: Certs, *, client_cert: bool = True, ca: Path | None = None) -> grpc.aio.Channel:
    credentials = grpc.ssl_channel_credentials(
        root_certificates=(ca or certs.ca).read_bytes(),
        private_key=certs.client_key.read_bytes() if client_cert else None,
        certificate_chain=certs.client_cert.read_bytes() if client_cert else None,
    )
    return grpc.aio.secure_channel(f"localhost:{port}", credentials)


async def _info(channel: grpc.aio.Channel, token: str | None) -> grpc.StatusCode:
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    async with channel:
        try:
            await specialist_pb2_grpc.SpecialistStub(channel).Info(specialist_pb2.InfoRequest(), timeout=5,
                                                                   metadata=metadata)
        except grpc.aio.AioRpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


async def test_specialist_requires_the_internal_token_and_a_client_certificate(specialist, certs: Certs) -> None:
    port = specialist.port
    assert await _info(_specialist_channel(port, certs), INTERNAL_TOKEN) == grpc.StatusCode.OK
    assert await _info(_specialist_channel(port, certs), None) == grpc.StatusCode.UNAUTHENTICATED
    assert await _info(_specialist_channel(port, certs), "wrong-token") == grpc.StatusCode.UNAUTHENTICATED
    # mutual TLS: no client certificate, or a server we do not trust, never reaches the servicer
    assert await _info(_specialist_channel(port, certs, client_cert=False), INTERNAL_TOKEN) == grpc.StatusCode.UNAVAILABLE
    assert await _info(_specialist_channel(port, certs, ca=certs.other_ca), INTERNAL_TOKEN) == grpc.StatusCode.UNAVAILABLE
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as plain:  # plain text to a TLS port
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await specialist_pb2_grpc.SpecialistStub(plain).Info(specialist_pb2.InfoRequest(), timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    # health answers without the token (kubelet probes), over the same TLS
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    async with _specialist_channel(port, certs, client_cert=True) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def _router(settings: MacaronSettings, tokenizer):
    from macaron.router.server import RouterServer
    from macaron.store import MemoryStore

    engine_url = settings.specialists.discovery.urls[0]
    server = RouterServer(settings, store=MemoryStore(), classifier=None, tokenizer=tokenizer,
                          discovery=StaticSource([engine_url]), host="127.0.0.1", port=0, serve_metrics=False)
    await server.start()
    return server


async def test_the_whole_chain_over_tls_with_internal_credentials(specialist, keyed_engine, certs: Certs, tokenizer) -> None:
    """SDK (TLS) → router (TLS) → specialist (mutual TLS + token) → engine (bearer key): a real answer."""
    router = await _router(_settings(keyed_engine.url, certs, specialist.port), tokenizer)
    try:
        async with AsyncMacaronClient(f"localhost:{router.port}", root_certificates=certs.ca.read_bytes(),
                                      timeout=60, max_retries=0) as client:
            assert await client.health()
            result = await client.chat.create(messages=[{"role": "user", "content": "hello"}], specialist="chat",
                                              max_tokens=4, temperature=0)
            assert result.route.specialist == "chat" and result.usage.completion_tokens >= 1
        # a client that does not trust the router's CA, or speaks plain text, gets nowhere
        async with AsyncMacaronClient(f"localhost:{router.port}", root_certificates=certs.other_ca.read_bytes(),
                                      timeout=5, max_retries=0) as untrusting:
            assert not await untrusting.health(timeout=3)
        async with AsyncMacaronClient(f"127.0.0.1:{router.port}", timeout=5, max_retries=0) as plain:
            assert not await plain.health(timeout=3)
    finally:
        await router.aclose()


async def test_router_with_a_wrong_internal_token_is_refused_by_the_specialist(specialist, keyed_engine, certs: Certs,
                                                                                tokenizer) -> None:
    router = await _router(_settings(keyed_engine.url, certs, specialist.port, internal_token="not-it"), tokenizer)
    try:
        async with AsyncMacaronClient(f"localhost:{router.port}", root_certificates=certs.ca.read_bytes(),
                                      timeout=30, max_retries=0) as client:
            with pytest.raises(AuthenticationError):
                await client.chat.create(messages=[{"role": "user", "content": "hello"}], specialist="chat", max_tokens=2)
    finally:
        await router.aclose()


@pytest.mark.parametrize("service", ["specialist", "router", "gateway"])  # the engine: engine_api/test_api_key.py
async def test_every_service_bound_off_loopback_refuses_to_start_without_credentials(service: str, tokenizer, keyed_engine,
                                                                              certs: Certs) -> None:
    if service == "specialist":
        from macaron.specialist.server import SpecialistServer, build_pipelines

        pipeline = build_pipelines(MacaronSettings(), ["chat"], tokenizer)["chat"]
        with pytest.raises(InsecureBindError, match="internal_token"):
            SpecialistServer(pipeline, "0.0.0.0", 0, serve_metrics=False)
        SpecialistServer(pipeline, "0.0.0.0", 0, serve_metrics=False, internal_token=INTERNAL_TOKEN,
                         tls=ServerTlsSettings())
    elif service == "router":
        from macaron.auth import hash_api_key
        from macaron.router.server import RouterServer
        from macaron.store import MemoryStore

        keys = {"api_keys": [{"name": "app", "sha256": hash_api_key("mk-app")}]}
        with pytest.raises(InsecureBindError, match="internal_token"):
            RouterServer(MacaronSettings(auth=keys), store=MemoryStore(), classifier=None, tokenizer=tokenizer,
                         host="0.0.0.0", port=0, serve_metrics=False)
        with pytest.raises(InsecureBindError, match="API keys"):
            RouterServer(MacaronSettings(auth={"internal_token": INTERNAL_TOKEN}), store=MemoryStore(), classifier=None,
                         tokenizer=tokenizer, host="0.0.0.0", port=0, serve_metrics=False)
    else:
        from macaron.gateway.app import create_app
        from macaron.store import MemoryStore

        with pytest.raises(InsecureBindError):
            create_app(MacaronSettings(gateway={"host": "0.0.0.0"}), store=MemoryStore())
