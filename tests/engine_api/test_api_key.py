"""The engine's API key, as SGLang's `--api-key`: a bearer key on every path but health and metrics.

Runs against a keyed embedded engine (tiny model), or against any base-group server given by
`$MACARON_ENGINE_URL` together with its key in `$MACARON_ENGINE_API_KEY` (a real SGLang
started with `--api-key`): the wire contract is SGLang's middleware, 401 `{"error": "Unauthorized"}`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from engine_api.conftest import ENGINE_URL_ENV
from engine_api.servers import ThreadedServer
from macaron.engine_client import AsyncEngineClient, EngineClientError

API_KEY_ENV = "MACARON_ENGINE_API_KEY"
ONE_TOKEN = {"text": "hi", "sampling_params": {"max_new_tokens": 1, "temperature": 0}}


@dataclass
class KeyedEngine:
    url: str
    key: str


@pytest.fixture(scope="module")
def keyed(request: pytest.FixtureRequest) -> Iterator[KeyedEngine]:
    url = os.environ.get(ENGINE_URL_ENV)
    if url:
        key = os.environ.get(API_KEY_ENV)
        if not key:
            pytest.skip(f"set {API_KEY_ENV} to the key the server at {ENGINE_URL_ENV} was started with")
        yield KeyedEngine(url.rstrip("/"), key)
        return
    from macaron.engine.args import EngineArgs
    from macaron.engine.async_engine import AsyncLLMEngine
    from macaron.engine.http_server import create_app

    tiny = request.getfixturevalue("tiny_model")
    args = EngineArgs(model_path=str(tiny.model_dir), lora_paths=[f"{n}={p}" for n, p in tiny.adapters.items()],
                      max_running_requests=2, log_level="warning", api_key="engine-contract-key")
    server = ThreadedServer(create_app(AsyncLLMEngine.from_args(args), args)).start()
    try:
        yield KeyedEngine(server.url, "engine-contract-key")
    finally:
        server.stop()


@pytest.mark.parametrize("path", ["/generate", "/abort_request", "/load_lora_adapter", "/unload_lora_adapter"])
def test_work_and_admin_paths_need_the_key(keyed: KeyedEngine, path: str) -> None:
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": keyed.key}):
        response = httpx.post(keyed.url + path, json=ONE_TOKEN, headers=headers, timeout=10)
        assert response.status_code == 401 and response.json() == {"error": "Unauthorized"}, (path, headers)


def test_info_paths_need_the_key_but_probes_and_metrics_do_not(keyed: KeyedEngine) -> None:
    for path in ("/server_info", "/get_model_info", "/v1/models"):
        assert httpx.get(keyed.url + path, timeout=10).status_code == 401, path
    for path in ("/health", "/metrics"):  # kubelet probes and Prometheus carry no key
        assert httpx.get(keyed.url + path, timeout=60).status_code == 200, path


def test_the_right_key_is_served(keyed: KeyedEngine) -> None:
    response = httpx.post(keyed.url + "/generate", json=ONE_TOKEN, headers={"authorization": f"Bearer {keyed.key}"},
                          timeout=60)
    assert response.status_code == 200 and response.json()["meta_info"]["completion_tokens"] == 1


async def test_the_engine_client_sends_the_key(keyed: KeyedEngine) -> None:
    async with AsyncEngineClient(keyed.url, api_key=keyed.key, timeout=60, max_retries=0) as client:
        result = await client.generate(text="hi", sampling_params={"max_new_tokens": 1, "temperature": 0})
        assert result.meta_info.completion_tokens == 1
        stream = client.with_options(timeout=30).generate_stream(text="hi", sampling_params={"max_new_tokens": 2})
        async with stream:
            assert [chunk async for chunk in stream]  # copies and streams carry it too
    async with AsyncEngineClient(keyed.url, timeout=30, max_retries=0) as keyless:
        with pytest.raises(EngineClientError) as info:
            await keyless.generate(text="hi", sampling_params={"max_new_tokens": 1})
        assert info.value.status_code == 401


def test_the_embedded_engine_refuses_a_public_address_without_a_key() -> None:
    from macaron.auth import InsecureBindError
    from macaron.engine.api_key import check_engine_bind

    check_engine_bind("127.0.0.1", None)
    check_engine_bind("0.0.0.0", "a-key")
    with pytest.raises(InsecureBindError, match="api-key"):
        check_engine_bind("0.0.0.0", None)
