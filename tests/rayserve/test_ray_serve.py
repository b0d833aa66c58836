"""The Ray Serve shape for real: a local Ray cluster (2 CPUs), the whole application on loopback,
driven with the official `openai` client; one specialist scaled up and back down while requests
flow; then a clean shutdown.

Ray starts once for the module, with the tiny model. Most of the time goes to starting replica
processes (each imports Ray, Serve and its component), so the cluster is small and every wait
polls for the state it needs instead of sleeping. Ray runs its workers at nice 15 by default,
which on a shared, busy machine starves exactly the replicas this test waits for; here they run
at the test's own priority (`RAY_worker_niceness=0`).

Ray must start here; when it cannot (no shared memory, ...) the module is skipped with the reason.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.slow

SPECIALISTS = {"chat", "agent", "code", "ui"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class RayStack:
    settings: Any
    url: str


def _settings(cache_dir: Any, port: int) -> Any:
    from macaron.config import load_settings

    small = {"num_cpus": 0.1, "graceful_shutdown_timeout_s": 20, "graceful_shutdown_wait_loop_s": 0.5}
    return load_settings(overrides={
        "assets": {"cache_dir": str(cache_dir)},
        "classifier": {"escalation": False},  # no MiniLM in every router replica of a 2-core test
        "ray": {
            "app_name": "macaron-test", "http_port": port, "num_cpus": 2,
            "engine": {"num_cpus": 0.5, "graceful_shutdown_wait_loop_s": 0.5}, "specialists": small, "router": small,
            "gateway": small,
            "specialist_overrides": {"code": {**small, "autoscaling": {
                "min_replicas": 1, "max_replicas": 2, "target_ongoing_requests": 1, "look_back_period_s": 2,
                "upscale_delay_s": 0, "downscale_delay_s": 1}}},
        },
    })


def _replicas(app: str, deployment: str) -> dict[str, int]:
    from ray import serve

    status = serve.status().applications[app].deployments[deployment]
    return {str(state): count for state, count in status.replica_states.items()}


def _wait_for(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s")


def _wait_replicas(app: str, deployment: str, running: int, timeout_s: float) -> None:
    def settled() -> bool:
        states = _replicas(app, deployment)
        return states.get("RUNNING", 0) == running and sum(states.values()) == running

    _wait_for(settled, timeout_s, f"{deployment} settling at {running} running replicas ({_replicas(app, deployment)})")


@pytest.fixture(scope="module")
def ray_stack(tiny_model, macaron_cache_dir) -> Iterator[RayStack]:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    # Load reports every second instead of ten, so the autoscaling test settles in seconds.
    os.environ.setdefault("RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S", "1")
    os.environ.setdefault("RAY_SERVE_HANDLE_AUTOSCALING_METRIC_PUSH_INTERVAL_S", "1")
    os.environ.setdefault("RAY_worker_niceness", "0")  # see the module doc
    import ray

    from macaron.rayserve import cli

    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    except Exception as exc:  # noqa: BLE001 - the only reason to skip: Ray cannot run on this machine
        print(f"Ray cannot start here: {exc!r}")
        pytest.skip(f"Ray cannot start here: {exc!r}")
    settings = _settings(macaron_cache_dir, _free_port())
    try:
        url = cli.start(settings)
        stack = RayStack(settings, url)
        yield stack
    finally:
        if ray.is_initialized():
            from ray import serve

            serve.shutdown()
            ray.shutdown()


def _client(url: str) -> Any:
    from openai import OpenAI

    return OpenAI(base_url=f"{url}/v1", api_key="dev", timeout=60, max_retries=0)


def test_openai_client_auto_stream_and_forced(ray_stack: RayStack) -> None:
    client = _client(ray_stack.url)
    raw = client.chat.completions.with_raw_response.create(
        model="macaron-auto", messages=[{"role": "user", "content": "Fix this KeyError in my Python dict code"}],
        max_tokens=8, extra_headers={"x-session-id": "ray-s1"},
    )
    assert raw.headers["x-macaron-specialist"] in SPECIALISTS
    assert raw.headers["x-macaron-route-reason"]
    completion = raw.parse()
    assert completion.choices[0].message.content
    assert completion.usage is not None and completion.usage.completion_tokens > 0

    chunks = list(client.chat.completions.create(
        model="macaron-auto", messages=[{"role": "user", "content": "Tell me a story"}], max_tokens=8,
        stream=True, stream_options={"include_usage": True},
    ))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0

    forced = client.chat.completions.with_raw_response.create(
        model="macaron-ui", messages=[{"role": "user", "content": "hello"}], max_tokens=8)
    assert forced.headers["x-macaron-specialist"] == "ui"
    assert forced.headers["x-macaron-route-reason"] == "explicit"


def test_bad_input_is_a_4xx_through_serve(ray_stack: RayStack) -> None:
    r = httpx.post(f"{ray_stack.url}/v1/chat/completions", json={"model": "macaron-auto", "messages": "nope"}, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(f"{ray_stack.url}/v1/chat/completions",
                   json={"model": "macaron-code", "messages": [{"role": "user", "content": "x"}], "max_tokens": -1}, timeout=30)
    assert r.status_code == 400, r.text


def test_scale_one_specialist_up_and_down_while_requests_flow(ray_stack: RayStack) -> None:
    """Serve's autoscaler sees the code specialist's ongoing streams (they travel through its handle),
    adds a replica under load and removes it when the load drops, and no request fails meanwhile."""
    from ray import serve

    app, name = ray_stack.settings.ray.app_name, "Specialist-code"
    directory = serve.get_deployment_handle("EngineDirectory", app_name=app)
    engines_before = directory.urls.remote().result()
    ok: list[float] = []
    failed: list[str] = []
    stops = [threading.Event() for _ in range(4)]

    def traffic(stop: threading.Event) -> None:
        client = _client(ray_stack.url)
        while not stop.is_set():
            try:
                stream = client.chat.completions.create(
                    model="macaron-code", messages=[{"role": "user", "content": "a loop in Python"}],
                    max_tokens=16, stream=True, extra_body={"repetition_penalty": 1.0})
                text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
                ok.append(time.monotonic()) if text else failed.append("empty answer")
            except Exception as exc:  # noqa: BLE001 - every failure is counted and shown
                failed.append(repr(exc))

    workers = [threading.Thread(target=traffic, args=(stop,), daemon=True) for stop in stops]
    assert _replicas(app, name) == {"RUNNING": 1}
    for w in workers:
        w.start()
    try:
        _wait_replicas(app, name, 2, 90)  # four streams at once, target 1 per replica, at most 2
        for stop in stops[1:]:
            stop.set()  # one stream left: the autoscaler goes back to one replica
        _wait_replicas(app, name, 1, 60)
        after = len(ok)
        _wait_for(lambda: len(ok) > after or bool(failed), 30, "a request completing after scaling back down")
    finally:
        for stop in stops:
            stop.set()
        for w in workers:
            w.join(60)
    assert not failed, f"{len(failed)} of {len(ok) + len(failed)} requests failed while scaling: {failed[:3]}"
    # Only the scaled deployment changed: the engine kept its replica (a restarted one has a new port).
    assert directory.urls.remote().result() == engines_before


def test_shutdown_is_clean(ray_stack: RayStack) -> None:
    import ray

    from macaron.rayserve import cli

    cli.stop(ray_stack.settings, shutdown_ray=True)
    assert not ray.is_initialized()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{ray_stack.url}/healthz", timeout=5)
