"""Sending one turn: REST (the gateway's /v1/chat/completions, SSE) or gRPC (the SDK's Router.Generate).

Each `send` fills a RequestResult: outcome, time to first token, end-to-end time, the route, the
token counts (cached ones included). The caller owns the deadline (a request that outlives it is
lost) and tells the gateway (`x-macaron-timeout`), so work past it is stopped and answered 504;
transport-level timeouts are set a little later so they never decide first.
"""

from __future__ import annotations

import json
import time
from typing import Any, Protocol

from macaron.loadgen.config import LoadConfig
from macaron.loadgen.report import OK, RequestResult
from macaron.telemetry import DEADLINE_HEADER

TIMEOUT_SLACK_S = 5.0
TIMEOUT_HEADER = DEADLINE_HEADER
"""The gateway's deadline header, the one every hop passes on (macaron.telemetry)."""


class Transport(Protocol):
    async def send(self, messages: list[dict[str, Any]], session_id: str, result: RequestResult) -> None: ...

    async def close(self) -> None: ...


def specialist_of(model: str) -> str:
    """`macaron-auto` → `auto`, `macaron-code` → `code` (the SDK names specialists without the prefix)."""
    return model.removeprefix("macaron-") or "auto"


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class RestTransport:
    """OpenAI-compatible chat completions over httpx, streamed with usage (stream_options.include_usage)."""

    def __init__(self, config: LoadConfig) -> None:
        import httpx

        self._httpx = httpx
        self.config = config
        headers = {"authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        headers[TIMEOUT_HEADER] = f"{config.timeout_s:g}"  # the gateway answers 504 before this deadline, never late
        self.client = httpx.AsyncClient(
            base_url=config.target.rstrip("/"), headers=headers,
            timeout=httpx.Timeout(config.timeout_s + TIMEOUT_SLACK_S, connect=5.0),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=128),
        )

    def _body(self, messages: list[dict[str, Any]], session_id: str) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.config.model, "messages": messages, "max_tokens": self.config.max_tokens,
                                "user": session_id, "stream": self.config.stream}
        if self.config.stream:
            body["stream_options"] = {"include_usage": True}
        return body

    async def send(self, messages: list[dict[str, Any]], session_id: str, result: RequestResult) -> None:
        httpx = self._httpx
        started = time.monotonic()
        try:
            async with self.client.stream("POST", "/v1/chat/completions", json=self._body(messages, session_id),
                                          headers={"x-session-id": session_id}) as response:
                result.specialist = response.headers.get("x-macaron-specialist") or None
                if response.status_code != 200:
                    await response.aread()
                    result.retry_after_s = _retry_after(response.headers.get("retry-after"))
                    result.detail = _error_message(response.content)
                    result.e2e_s = time.monotonic() - started
                    result.outcome = f"http_{response.status_code}"
                    return
                if self.config.stream:
                    await self._read_stream(response, result, started)
                else:
                    await response.aread()
                    self._read_whole(response.json(), result, started)
        except httpx.ConnectError as exc:
            result.detail, result.outcome = str(exc), "connect_error"
        except (httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError) as exc:
            result.detail, result.outcome = str(exc) or type(exc).__name__, "stream_cut"

    async def _read_stream(self, response: Any, result: RequestResult, started: float) -> None:
        parts: list[str] = []
        done = False
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            event = json.loads(data)
            if "error" in event:
                error = event["error"] or {}
                result.detail = str(error.get("message", ""))
                result.outcome = f"stream_error:{error.get('code') or error.get('type') or 'unknown'}"
                return
            for choice in event.get("choices") or []:
                delta = choice.get("delta") or {}
                if delta.get("content") or delta.get("tool_calls"):
                    if result.ttft_s is None:
                        result.ttft_s = time.monotonic() - started
                    parts.append(delta.get("content") or "")
            if event.get("usage"):
                self._usage(event["usage"], result)
        result.e2e_s = time.monotonic() - started
        result.text = "".join(parts)
        result.outcome = OK if done else "stream_cut"

    def _read_whole(self, body: dict[str, Any], result: RequestResult, started: float) -> None:
        result.e2e_s = result.ttft_s = time.monotonic() - started
        choices = body.get("choices") or [{}]
        result.text = (choices[0].get("message") or {}).get("content") or ""
        self._usage(body.get("usage") or {}, result)
        result.outcome = OK

    @staticmethod
    def _usage(usage: dict[str, Any], result: RequestResult) -> None:
        result.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        result.completion_tokens = int(usage.get("completion_tokens") or 0)
        result.cached_tokens = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)

    async def close(self) -> None:
        await self.client.aclose()


def _error_message(content: bytes) -> str:
    try:
        return str(json.loads(content)["error"]["message"])[:300]
    except (ValueError, KeyError, TypeError):
        return content[:300].decode(errors="replace")


class GrpcTransport:
    """The project's SDK (AsyncMacaronClient) against the router, streamed."""

    def __init__(self, config: LoadConfig) -> None:
        from macaron.sdk import AsyncMacaronClient

        self.config = config
        self.client = AsyncMacaronClient(config.target, api_key=config.api_key, timeout=config.timeout_s + TIMEOUT_SLACK_S,
                                         max_retries=config.max_retries)

    async def send(self, messages: list[dict[str, Any]], session_id: str, result: RequestResult) -> None:
        from macaron.sdk import APIError

        started = time.monotonic()
        parts: list[str] = []
        try:
            stream = await self.client.chat.create(
                messages=messages, stream=True, specialist=specialist_of(self.config.model),  # type: ignore[arg-type]
                session_id=session_id, max_tokens=self.config.max_tokens,
            )
            try:
                async for chunk in stream:
                    if chunk.route is not None and chunk.route.specialist:
                        result.specialist = chunk.route.specialist
                    if (chunk.text or chunk.tool_calls) and result.ttft_s is None:
                        result.ttft_s = time.monotonic() - started
                    parts.append(chunk.text)
                    if chunk.usage is not None:
                        result.prompt_tokens = chunk.usage.prompt_tokens
                        result.completion_tokens = chunk.usage.completion_tokens
                        result.cached_tokens = chunk.usage.cached_tokens
            finally:
                await stream.close()
        except APIError as exc:
            result.e2e_s = time.monotonic() - started
            result.retry_after_s = exc.retry_after_s
            result.detail = exc.message[:300]
            result.outcome = f"grpc_{exc.code.name}"
            return
        result.e2e_s = time.monotonic() - started
        result.text = "".join(parts)
        result.outcome = OK

    async def close(self) -> None:
        await self.client.close()


def make_transport(config: LoadConfig) -> Transport:
    return RestTransport(config) if config.transport == "rest" else GrpcTransport(config)
