"""Inputs that once crashed into 500s: each is a 4xx in OpenAI's error shape, with x-request-id."""

from __future__ import annotations

import json

import httpx
import pytest

from engine_api.servers import ThreadedServer

HI = [{"role": "user", "content": "hi"}]


def _nested_schema(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def _raw(server: ThreadedServer, content: bytes, headers: dict[str, str | bytes] | None = None) -> httpx.Response:
    return httpx.post(server.url + "/v1/chat/completions", content=content,
                      headers={"content-type": "application/json", **(headers or {})}, timeout=20.0)


def _assert_openai_error(response: httpx.Response, status: int = 400, param: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert response.headers["x-request-id"]
    if param is not None:
        assert error["param"] == param, error
    return error


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"max_tokens": 2**31}, "max_tokens"),
        ({"max_completion_tokens": 2**40}, "max_completion_tokens"),
        ({"seed": 2**63}, "seed"),
        ({"seed": -(2**63) - 1}, "seed"),
    ],
)
def test_integers_out_of_the_wire_range_are_400(dev_gateway: ThreadedServer, extra: dict, param: str) -> None:
    body = json.dumps({"model": "macaron-auto", "messages": HI, **extra}).encode()
    error = _assert_openai_error(_raw(dev_gateway, body), param=param)
    assert error["code"] == "invalid_value"


def test_lone_surrogate_in_content_is_400(dev_gateway: ThreadedServer) -> None:
    body = b'{"model": "macaron-auto", "messages": [{"role": "user", "content": "a\\ud800b"}]}'
    error = _assert_openai_error(_raw(dev_gateway, body), param="messages[0].content")
    assert "surrogate" in error["message"]


def test_deeply_nested_schema_is_400(dev_gateway: ThreadedServer) -> None:
    body = {"model": "macaron-auto", "messages": HI, "response_format": {
        "type": "json_schema", "json_schema": {"name": "deep", "schema": _nested_schema(300)}}}
    error = _assert_openai_error(_raw(dev_gateway, json.dumps(body).encode()))
    assert "nested" in error["message"]


def test_deeply_nested_body_is_400(dev_gateway: ThreadedServer) -> None:
    deep = "[" * 5000 + "]" * 5000
    body = ('{"model": "macaron-auto", "messages": [{"role": "user", "content": "hi"}], "metadata": ' + deep + "}")
    error = _assert_openai_error(_raw(dev_gateway, body.encode()))
    assert "nested" in error["message"]


def test_non_ascii_request_id_is_replaced(dev_gateway: ThreadedServer) -> None:
    body = json.dumps({"model": "macaron-auto", "messages": HI}).encode()
    response = _raw(dev_gateway, body, headers={"x-request-id": "caf\u00e9-\u00fc".encode()})
    assert response.status_code == 200, response.text
    rid = response.headers["x-request-id"]
    assert rid.isascii() and "caf" not in rid


def test_unexpected_errors_are_500_with_request_id(dev_gateway: ThreadedServer, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_a, **_k):
        raise RuntimeError("a bug")

    monkeypatch.setattr("macaron.gateway.serving_chat.sdk_params", boom)
    response = httpx.post(dev_gateway.url + "/v1/chat/completions", json={"model": "macaron-auto", "messages": HI},
                          headers={"x-request-id": "req-500"}, timeout=20.0)
    error = _assert_openai_error(response, status=500)
    assert error["type"] == "server_error" and response.headers["x-request-id"] == "req-500"
