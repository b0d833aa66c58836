"""EndpointSlice discovery against a fake Kubernetes API server on loopback (list + watch JSON as the API sends it)."""

from __future__ import annotations

import asyncio
import json
import queue
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from macaron.discovery import DiscoveryError
from macaron.discovery_k8s import EndpointSliceSettings, EndpointSliceSource, slice_urls

PATH = "/apis/discovery.k8s.io/v1/namespaces/serving/endpointslices"


def endpoint_slice(name: str, addresses: list[tuple[str, bool | None]], *, rv: str, port_name: str = "http",
                   port: int = 30000, address_type: str = "IPv4") -> dict:
    """An EndpointSlice as the API serves it (discovery.k8s.io/v1)."""
    endpoints = []
    for address, ready in addresses:
        conditions = {} if ready is None else {"ready": ready, "serving": ready, "terminating": False}
        endpoints.append({"addresses": [address], "conditions": conditions,
                          "targetRef": {"kind": "Pod", "name": f"engine-{address}", "namespace": "serving"}})
    return {
        "kind": "EndpointSlice",
        "apiVersion": "discovery.k8s.io/v1",
        "metadata": {"name": name, "namespace": "serving", "resourceVersion": rv,
                     "labels": {"kubernetes.io/service-name": "engine", "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
        "addressType": address_type,
        "endpoints": endpoints,
        "ports": [{"name": "metrics", "port": 9090, "protocol": "TCP"}, {"name": port_name, "port": port, "protocol": "TCP"}],
    }


def test_slice_parsing() -> None:
    s = endpoint_slice("a", [("10.0.0.1", True), ("10.0.0.2", False), ("10.0.0.3", None)], rv="1")
    assert slice_urls(s, port_name="http", default_port=1, scheme="http") == {"http://10.0.0.1:30000", "http://10.0.0.3:30000"}
    assert slice_urls(s, port_name="http", default_port=1, scheme="http", include_not_ready=True) == {
        "http://10.0.0.1:30000", "http://10.0.0.2:30000", "http://10.0.0.3:30000"}
    assert slice_urls(s, port_name="grpc", default_port=1, scheme="http") == set()  # no such port
    assert slice_urls(s, port_name=None, default_port=1, scheme="https") == {"https://10.0.0.1:9090", "https://10.0.0.3:9090"}
    v6 = endpoint_slice("b", [("fd00::1", True)], rv="1", address_type="IPv6")
    assert slice_urls(v6, port_name="http", default_port=1, scheme="http") == {"http://[fd00::1]:30000"}
    assert slice_urls(endpoint_slice("c", [("x.example", True)], rv="1", address_type="FQDN"),
                      port_name="http", default_port=1, scheme="http") == set()


class FakeApi:
    """List answers with `items`; each watch streams the events put on `events` (None ends the watch)."""

    def __init__(self) -> None:
        self.items: list[dict] = []
        self.rv = "100"
        self.events: queue.Queue[dict | None] = queue.Queue()
        self.requests: list[dict] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # watches stream chunked, as the API server does

            def chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def log_message(self, *args) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # noqa: N802
                url = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                api.requests.append({"path": url.path, **query})
                if url.path != PATH or query.get("labelSelector") != "kubernetes.io/service-name=engine":
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if query.get("watch") not in ("true", "True", "1"):
                    body = json.dumps({"kind": "EndpointSliceList", "apiVersion": "discovery.k8s.io/v1",
                                       "metadata": {"resourceVersion": api.rv}, "items": api.items}).encode()
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Connection", "close")
                self.end_headers()
                while True:
                    try:
                        event = api.events.get(timeout=10)
                    except queue.Empty:
                        event = None
                    if event is None:
                        self.chunk(b"")  # the last chunk: the watch ends
                        return
                    self.chunk((json.dumps(event) + "\n").encode())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.events.put(None)
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def api():
    fake = FakeApi()
    yield fake
    fake.close()


async def eventually(source: EndpointSliceSource, expected: tuple[str, ...], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    got: object = None
    while time.monotonic() < deadline:
        try:
            got = await source.replicas()
        except DiscoveryError as exc:
            got = exc
        if got == expected:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"replicas {got!r}, expected {expected!r}")


async def test_list_then_watch(api: FakeApi) -> None:
    api.items = [endpoint_slice("engine-a", [("10.0.0.1", True), ("10.0.0.2", False)], rv="90")]
    settings = EndpointSliceSettings(enabled=True, service_name="engine", namespace="serving", port_name="http",
                                     api_url=api.url, watch_timeout_s=30)
    source = EndpointSliceSource(settings, retry_s=0.1)
    try:
        await eventually(source, ("http://10.0.0.1:30000",))
        # the pod became ready; a second slice appeared
        api.events.put({"type": "MODIFIED", "object": endpoint_slice("engine-a", [("10.0.0.1", True), ("10.0.0.2", True)], rv="101")})
        api.events.put({"type": "ADDED", "object": endpoint_slice("engine-b", [("10.0.1.7", True)], rv="102")})
        await eventually(source, ("http://10.0.0.1:30000", "http://10.0.0.2:30000", "http://10.0.1.7:30000"))
        api.events.put({"type": "BOOKMARK", "object": {"kind": "EndpointSlice", "metadata": {"resourceVersion": "150"}}})
        api.events.put({"type": "DELETED", "object": endpoint_slice("engine-a", [], rv="151")})
        await eventually(source, ("http://10.0.1.7:30000",))
        assert source.resource_version == "151"
        watch = [r for r in api.requests if r.get("watch") in ("true", "True")]
        assert watch and watch[0]["resourceVersion"] == "100"
        # the version expired (410): the watcher lists again and sees the new state
        api.items = [endpoint_slice("engine-c", [("10.0.2.1", True)], rv="200")]
        api.rv = "200"
        api.events.put({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                    "message": "too old resource version", "reason": "Expired", "code": 410}})
        api.events.put(None)
        await eventually(source, ("http://10.0.2.1:30000",))
    finally:
        await source.close()


async def test_unreachable_api_server_is_a_discovery_error() -> None:
    settings = EndpointSliceSettings(enabled=True, service_name="engine", namespace="serving",
                                     api_url="http://127.0.0.1:9", initial_sync_timeout_s=0.5)
    source = EndpointSliceSource(settings, retry_s=0.1)
    try:
        with pytest.raises(DiscoveryError):
            await source.replicas()
    finally:
        await source.close()
