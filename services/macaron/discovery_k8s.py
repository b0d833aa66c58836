"""Base-group replicas from the Kubernetes API: a list-then-watch of a Service's EndpointSlices.

`EndpointSliceSource` implements `macaron.discovery.ReplicaSource`. A background thread runs
the `kubernetes` client's list (to get every slice and a resourceVersion) and then a watch
from that version; ADDED/MODIFIED replace a slice's endpoints, DELETED removes them, an
expired version (410) or a dropped connection starts over with a new list after a short
back-off. `replicas()` returns the ready addresses of every slice as normalized URLs, and
keeps serving the last known set while the API server is unreachable.

Parsing (`slice_urls`) works on the API's JSON, so it is tested without a cluster. The client
is imported only when a source is built, so importing this module stays light (the
configuration imports `EndpointSliceSettings`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from macaron.discovery import DiscoveryError, normalize_url
from macaron.ports import ENGINE_PORT

log = logging.getLogger(__name__)

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class EndpointSliceSettings(BaseModel):
    """Discovery of the base-weight group through the Kubernetes API (EndpointSlices of one Service)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(False, description="Watch EndpointSlices instead of the static list or DNS.")
    service_name: str | None = Field(None, description="Service whose EndpointSlices list the engine pods.")
    namespace: str | None = Field(
        None, description="Namespace of the Service; empty: the pod's own namespace, else `default`."
    )
    port_name: str | None = Field(
        None, description="Name of the EndpointSlice port to use; empty: the slice's only (or first) port."
    )
    port: int = Field(ENGINE_PORT, description="Port used when a slice lists no port.")
    scheme: Literal["http", "https"] = Field("http", description="URL scheme of the replicas.")
    api_url: str | None = Field(
        None, description="API server URL (e.g. `kubectl proxy`'s); empty: in-cluster config, else ~/.kube/config."
    )
    watch_timeout_s: int = Field(240, description="Server-side timeout of one watch request; the watcher then resumes.")
    initial_sync_timeout_s: float = Field(10.0, description="How long the first `replicas()` waits for the first list.")
    include_not_ready: bool = Field(False, description="Also use endpoints whose `ready` condition is false.")


def slice_urls(obj: dict[str, Any], *, port_name: str | None, default_port: int, scheme: str,
               include_not_ready: bool = False) -> set[str]:
    """The normalized URLs of one EndpointSlice (API JSON): ready endpoints × the chosen port."""
    if obj.get("addressType", "IPv4") not in ("IPv4", "IPv6"):
        return set()  # FQDN slices name hosts we cannot compare with hints
    ports = obj.get("ports") or []
    port = default_port
    if port_name:
        named = [p for p in ports if p.get("name") == port_name and p.get("port")]
        if not named:
            return set()
        port = int(named[0]["port"])
    elif ports and ports[0].get("port"):
        port = int(ports[0]["port"])
    urls: set[str] = set()
    for endpoint in obj.get("endpoints") or []:
        ready = (endpoint.get("conditions") or {}).get("ready")
        if ready is False and not include_not_ready:  # nil means ready (API semantics)
            continue
        for address in endpoint.get("addresses") or []:
            host = f"[{address}]" if ":" in address else address
            urls.add(normalize_url(f"{scheme}://{host}:{port}"))
    return urls


def _pod_namespace() -> str:
    try:
        return NAMESPACE_FILE.read_text().strip() or "default"
    except OSError:
        return "default"


def _api_client(settings: EndpointSliceSettings) -> Any:
    from kubernetes import client, config

    if settings.api_url:
        configuration = client.Configuration()
        configuration.host = settings.api_url.rstrip("/")
        return client.ApiClient(configuration)
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()


class EndpointSliceSource:
    """Replicas of one Service, kept current by a list-and-watch thread."""

    def __init__(self, settings: EndpointSliceSettings, *, retry_s: float = 1.0) -> None:
        if not settings.service_name:
            raise DiscoveryError("Kubernetes discovery needs router.kubernetes.service_name")
        self.settings = settings
        self.namespace = settings.namespace or _pod_namespace()
        self.selector = f"{SERVICE_NAME_LABEL}={settings.service_name}"
        self._retry_s = retry_s
        self._slices: dict[str, set[str]] = {}
        self._current: tuple[str, ...] = ()
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._watch: Any = None
        self.resource_version: str | None = None
        self.last_error: str | None = None
        self._thread = threading.Thread(target=self._run, name=f"endpointslices-{settings.service_name}", daemon=True)
        self._thread.start()

    async def replicas(self) -> tuple[str, ...]:
        if not self._synced.is_set():
            synced = await asyncio.to_thread(self._synced.wait, self.settings.initial_sync_timeout_s)
            if not synced:
                raise DiscoveryError(
                    f"no EndpointSlice list of service {self.settings.service_name} in {self.namespace} yet"
                    f" ({self.last_error or 'waiting for the API server'})"
                )
        with self._lock:
            current = self._current
        if not current:
            raise DiscoveryError(f"service {self.settings.service_name} in {self.namespace} has no ready endpoint")
        return current

    async def close(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()

    # ------------------------------------------------------------ the watcher thread

    def _urls(self, obj: dict[str, Any]) -> set[str]:
        s = self.settings
        return slice_urls(obj, port_name=s.port_name, default_port=s.port, scheme=s.scheme,
                          include_not_ready=s.include_not_ready)

    def _publish(self) -> None:
        with self._lock:
            self._current = tuple(sorted(set().union(*self._slices.values()))) if self._slices else ()

    def apply_list(self, body: dict[str, Any]) -> None:
        """Replaces every slice with a list response's items."""
        self._slices = {item["metadata"]["name"]: self._urls(item) for item in body.get("items") or []}
        self.resource_version = (body.get("metadata") or {}).get("resourceVersion")
        self._publish()
        self._synced.set()

    def apply_event(self, event: dict[str, Any]) -> None:
        """Applies one watch event (ADDED, MODIFIED, DELETED, BOOKMARK)."""
        obj = event.get("object") or {}
        metadata = obj.get("metadata") or {}
        if metadata.get("resourceVersion"):
            self.resource_version = metadata["resourceVersion"]
        kind = event.get("type")
        if kind in ("ADDED", "MODIFIED"):
            self._slices[metadata["name"]] = self._urls(obj)
        elif kind == "DELETED":
            self._slices.pop(metadata.get("name", ""), None)
        else:
            return
        self._publish()

    def _run(self) -> None:
        from kubernetes import client, watch

        api = client.DiscoveryV1Api(_api_client(self.settings))
        while not self._stop.is_set():
            try:
                response = api.list_namespaced_endpoint_slice(
                    self.namespace, label_selector=self.selector, _preload_content=False, _request_timeout=30
                )
                self.apply_list(json.loads(response.data))
                self.last_error = None
                self._watch = watch.Watch()
                for event in self._watch.stream(
                    api.list_namespaced_endpoint_slice,
                    self.namespace,
                    label_selector=self.selector,
                    resource_version=self.resource_version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=self.settings.watch_timeout_s,
                    deserialize=False,
                ):
                    self.apply_event(event)
                    if self._stop.is_set():
                        break
                # the watch ended (server timeout): list again, which also heals missed events
            except Exception as exc:  # API errors, 410 Gone, connection loss: start over
                self.last_error = f"{exc.__class__.__name__}: {exc}"
                if not self._stop.is_set():
                    log.warning("EndpointSlice watch of %s failed (%s); retrying, keeping %d replicas",
                                self.settings.service_name, self.last_error, len(self._current))
                self._stop.wait(self._retry_s)
