"""`macaron serve` itself: startup checks, helpers, and a clean stop with an in-flight stream.

Runs after the other e2e modules (file order): its last test stops the shared stack.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
from pathlib import Path

import httpx
import pytest

from macaron.serve import Endpoints, banner, choose_port, port_is_free
from specialist.processes import macaron_command

from .conftest import API_KEY, Stack

REPO = Path(__file__).resolve().parents[2]


def test_example_config_loads() -> None:
    from macaron.config import load_settings

    settings = load_settings(REPO / "examples" / "macaron.yaml")
    assert settings.gateway.port == 8080 and settings.router.port == 50051


def test_internal_ports_fall_back_when_taken() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert not port_is_free(port)
        assert choose_port(port, fallback=True) == 0  # 0: the server binds any free port
        with pytest.raises(RuntimeError, match="taken"):
            choose_port(port, fallback=False)
    assert choose_port(port, fallback=False) == port


def test_banner_says_dev_mode_and_has_a_curl() -> None:
    e = Endpoints("http://127.0.0.1:8080", "127.0.0.1:50051", "http://127.0.0.1:30000", {"chat": "127.0.0.1:50061"})
    text = banner(e)
    assert "DEV MODE" in text and "curl http://127.0.0.1:8080/v1/chat/completions" in text and "Authorization" not in text
    assert "playground (browser)         http://127.0.0.1:8080/\n" in text
    e.dev_mode = False
    assert "Authorization: Bearer $MACARON_API_KEY" in banner(e)


def test_the_cli_lists_serve_and_gateway() -> None:
    from macaron.cli import build_parser

    help_text = build_parser().format_help()
    assert "serve" in help_text and "gateway" in help_text


def test_refuses_a_public_address_without_keys(tmp_path: Path) -> None:
    config = tmp_path / "open.yaml"
    config.write_text("serve:\n  progress: false\n")
    proc = macaron_command("macaron.serve_cli", ["serve", "--host", "0.0.0.0", "--port", "0"], tmp_path / "log",
                           config=config)
    try:
        assert proc.proc.wait(60) == 2
    finally:
        proc.stop()
    assert "refusing to serve without API keys" in (tmp_path / "log").read_text()


def test_the_embedded_engine_publishes_kv_events_on_loopback(stack: Stack) -> None:
    """`macaron serve` turns the engine's KV-cache events on (a free loopback port), so its router places
    on what the engine really caches; the endpoint comes from the engine's server info, as for SGLang."""
    info = httpx.get(stack.engine_url + "/get_server_info", timeout=10).json()
    endpoint = info.get("kv_events_endpoint") or ""
    assert endpoint.startswith("tcp://127.0.0.1:") and not endpoint.endswith(":*"), info


def test_sigterm_lets_a_stream_finish_then_exits_cleanly(stack: Stack) -> None:
    body = {"model": "macaron-chat", "stream": True, "max_tokens": 300, "temperature": 0, "repetition_penalty": 1.0,
            "messages": [{"role": "user", "content": "Tell me a story"}]}
    lines: list[str] = []
    started = threading.Event()

    def read() -> None:
        with httpx.stream("POST", stack.api_url + "/chat/completions", json=body, timeout=60,
                          headers={"authorization": f"Bearer {API_KEY}"}) as response:
            for line in response.iter_lines():
                if line:
                    lines.append(line)
                    started.set()

    reader = threading.Thread(target=read)
    reader.start()
    assert started.wait(30)
    os.killpg(stack.process.proc.pid, signal.SIGTERM)
    reader.join(60)
    assert lines[-1] == "data: [DONE]", lines[-3:]
    finish = [json.loads(line[6:])["choices"][0]["finish_reason"] for line in lines[:-1]]
    assert finish[-1] == "length"  # the whole answer arrived although the stop signal came mid-stream
    assert stack.process.proc.wait(60) == 0
    log = stack.log.read_text()
    assert "Macaron Serve stopped." in log and "Traceback" not in log
    with pytest.raises(httpx.ConnectError):
        httpx.get(stack.gateway_url + "/healthz", timeout=2)
