"""Where the base-weight group's replicas are: one module for every service that calls the engine.

A `ReplicaSource` answers "which base-group URLs exist right now?". Two sources live here:
a static list, and DNS (every address of a Kubernetes headless Service, via getaddrinfo,
cached for `refresh_s`). The router adds a Kubernetes EndpointSlice watcher behind the same
Protocol, and the Ray Serve shape its engine directory (`macaron.rayserve.directory`). URLs are normalized (`normalize_url`) so that a caller's replica hint can be compared
with the discovered set exactly: a request may only pick among discovered replicas.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import time
from typing import Literal, Protocol
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from macaron.ports import ENGINE_PORT

log = logging.getLogger(__name__)


class DiscoveryError(RuntimeError):
    """No replica could be discovered (DNS failure, empty list)."""


class DiscoverySettings(BaseModel):
    """How a service finds the base-weight group's replicas."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["static", "dns", "ray"] = Field(
        "static", description="static: the `urls` list; dns: every address of `dns_name` (a headless Service); "
        "ray: the engine directory of the Serve application `ray_app` (set by `macaron ray`).",
    )
    urls: list[str] = Field(
        default_factory=list,
        description="Base-group URLs for mode static; empty: the embedded engine at engine.host:engine.port.",
    )
    dns_name: str | None = Field(None, description="Host name resolved in mode dns (e.g. engine-headless.ns.svc).")
    dns_port: int = Field(ENGINE_PORT, description="Port of every replica found through DNS.")
    dns_scheme: Literal["http", "https"] = Field("http", description="URL scheme of replicas found through DNS.")
    refresh_s: float = Field(10.0, description="Seconds a DNS answer is reused before resolving again.")
    ray_app: str = Field("macaron", description="Serve application whose engine directory mode ray reads.")


class ReplicaSource(Protocol):
    """The current set of base-group URLs (normalized, sorted)."""

    async def replicas(self) -> tuple[str, ...]:
        """Current replicas; may be cached; raises DiscoveryError when none can be found."""
        ...

    async def close(self) -> None: ...


def normalize_url(url: str) -> str:
    """`scheme://host:port` lower-cased, default port filled, path and trailing slash dropped."""
    parts = urlsplit(url.strip() if "://" in url else f"http://{url.strip()}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{_host_literal(parts.hostname.lower())}:{port}"


def _host_literal(host: str) -> str:
    try:
        return f"[{host}]" if ipaddress.ip_address(host).version == 6 else host
    except ValueError:
        return host


class StaticSource:
    """A fixed list of URLs (configuration, tests, the embedded stack)."""

    def __init__(self, urls: list[str]) -> None:
        if not urls:
            raise DiscoveryError("the static replica list is empty; set discovery urls")
        self._urls = tuple(sorted({normalize_url(u) for u in urls}))

    async def replicas(self) -> tuple[str, ...]:
        return self._urls

    async def close(self) -> None:
        return None


class DnsSource:
    """Every address a name resolves to (a headless Service lists one A/AAAA record per pod)."""

    def __init__(self, name: str, port: int, scheme: str = "http", refresh_s: float = 10.0) -> None:
        self._name, self._port, self._scheme, self._refresh_s = name, port, scheme, refresh_s
        self._cached: tuple[str, ...] = ()
        self._at = float("-inf")
        self._lock = asyncio.Lock()

    async def replicas(self) -> tuple[str, ...]:
        async with self._lock:
            if time.monotonic() - self._at < self._refresh_s and self._cached:
                return self._cached
            try:
                infos = await asyncio.get_running_loop().getaddrinfo(
                    self._name, self._port, type=socket.SOCK_STREAM
                )
            except OSError as exc:
                if self._cached:  # keep serving the last answer through a DNS blip
                    log.warning("DNS lookup of %s failed (%s); keeping %d cached replicas", self._name, exc, len(self._cached))
                    return self._cached
                raise DiscoveryError(f"cannot resolve {self._name}: {exc}") from exc
            hosts = {info[4][0] for info in infos}
            if not hosts:
                raise DiscoveryError(f"{self._name} resolves to no address")
            self._cached = tuple(sorted(normalize_url(f"{self._scheme}://{_host_literal(h)}:{self._port}") for h in hosts))
            self._at = time.monotonic()
            return self._cached

    async def close(self) -> None:
        return None


def build_source(settings: DiscoverySettings, default_url: str) -> ReplicaSource:
    """The source `settings` describe; `default_url` is used by static mode with no urls."""
    if settings.mode == "dns":
        if not settings.dns_name:
            raise DiscoveryError("discovery mode dns needs dns_name (the headless Service's name)")
        return DnsSource(settings.dns_name, settings.dns_port, settings.dns_scheme, settings.refresh_s)
    if settings.mode == "ray":
        from macaron.rayserve.directory import ServeDirectorySource

        return ServeDirectorySource(settings.ray_app, min(settings.refresh_s, 1.0))
    return StaticSource(settings.urls or [default_url])
