"""Engine clients for lifecycle work, one per replica URL (shared connections, short deadlines)."""

from __future__ import annotations

from macaron.engine_client import AsyncEngineClient


class EngineClients:
    """Clients by replica URL; no retries (each operation decides what to do on failure)."""

    def __init__(self, timeout_s: float = 10.0, api_key: str | None = None) -> None:
        self.timeout_s = timeout_s
        self.api_key = api_key  # the engines' key (SGLang's --api-key), when they have one
        self._clients: dict[str, AsyncEngineClient] = {}

    def get(self, url: str) -> AsyncEngineClient:
        client = self._clients.get(url)
        if client is None:
            client = self._clients[url] = AsyncEngineClient(
                url, timeout=self.timeout_s, max_retries=0, api_key=self.api_key
            )
        return client

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()
