"""Where the engine replicas of a Serve application are: a directory they renew, and the discovery
source the router and the specialists read it through.

Why a directory: the router places a request on one base-group replica (prefix cache,
load), so engine replicas must be addressable one by one, which a Serve handle is not. Each
engine replica runs the engine's own HTTP server (the SGLang native API) and renews
`url -> expiry` here every `engine_register_interval_s`; a replica that dies stops renewing and
drops out after three intervals, a replica shut down by Serve removes itself at once. The
directory is itself a one-replica deployment of the same application, so it lives and dies with it.
"""

from __future__ import annotations

import asyncio
import logging
import time

from macaron.discovery import DiscoveryError, normalize_url

log = logging.getLogger(__name__)
DIRECTORY_DEPLOYMENT = "EngineDirectory"


class EngineDirectory:
    """url -> expiry (monotonic seconds of this process)."""

    def __init__(self) -> None:
        self._expiry: dict[str, float] = {}

    def register(self, url: str, ttl_s: float) -> None:
        """Adds or renews `url` for `ttl_s` seconds."""
        self._expiry[normalize_url(url)] = time.monotonic() + ttl_s

    def unregister(self, url: str) -> None:
        self._expiry.pop(normalize_url(url), None)

    def urls(self) -> list[str]:
        """Live URLs, sorted; expired ones are dropped."""
        now = time.monotonic()
        for url in [u for u, t in self._expiry.items() if t <= now]:
            log.warning("engine replica %s stopped renewing; dropped", url)
            del self._expiry[url]
        return sorted(self._expiry)


class ServeDirectorySource:
    """`macaron.discovery.ReplicaSource` over an application's EngineDirectory (cached for `refresh_s`)."""

    def __init__(self, app_name: str, refresh_s: float = 1.0, handle: object | None = None) -> None:
        self._app_name = app_name
        self._refresh_s = refresh_s
        self._handle = handle
        self._cached: tuple[str, ...] = ()
        self._at = float("-inf")
        self._lock = asyncio.Lock()

    def _directory(self) -> object:
        if self._handle is None:
            from ray import serve

            self._handle = serve.get_deployment_handle(DIRECTORY_DEPLOYMENT, app_name=self._app_name)
        return self._handle

    async def replicas(self) -> tuple[str, ...]:
        async with self._lock:
            if self._cached and time.monotonic() - self._at < self._refresh_s:
                return self._cached
            try:
                urls = await asyncio.wait_for(self._directory().urls.remote(), 5.0)  # type: ignore[attr-defined]
            except Exception as exc:  # noqa: BLE001 - keep serving the last answer through a blip
                if self._cached:
                    log.warning("engine directory did not answer (%r); keeping %d cached replicas", exc, len(self._cached))
                    return self._cached
                raise DiscoveryError(f"the engine directory of Serve application {self._app_name!r} "
                                     f"did not answer: {exc!r}") from exc
            if not urls:
                raise DiscoveryError(f"no engine replica of Serve application {self._app_name!r} is registered yet")
            self._cached = tuple(urls)
            self._at = time.monotonic()
            return self._cached

    async def close(self) -> None:
        return None
