"""AsyncEngineClient: SGLang's native HTTP API (the embedded engine or a real SGLang server).

What it takes care of so callers do not have to:
- every call has a deadline (`timeout`, seconds, for the whole call: retries and stream
  included); passing it raises EngineTimeoutError;
- a request is retried only while it cannot have produced anything: connect errors, and
  503/429 (or SGLang's in-stream "queue full" abort) before the first token; never after;
- a caller that stops reading a stream, is cancelled, or runs out of time makes the client
  send /abort_request, so the engine frees the request's compute at once; and /generate tells
  the engine the time left (`x-macaron-timeout`, seconds): the embedded engine stops the request
  then even if this process vanished without closing the connection (SGLang ignores the header);
- streamed chunks carry both the new text and all the text so far, whether the server
  streams cumulative text (SGLang's default) or increments (`incremental_streaming_output`;
  read once from /server_info).
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import uuid
from typing import Any, AsyncIterator, Mapping

import httpx

from macaron import telemetry

from macaron.engine_client._constants import (
    ABORT_TIMEOUT_S,
    DEADLINE_HEADER,
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT_S,
    INITIAL_RETRY_DELAY_S,
    MAX_RETRY_DELAY_S,
)
from macaron.engine_client._exceptions import (
    EngineClientError,
    EngineTimeoutError,
    EngineUnavailableError,
    make_status_error,
)
from macaron.engine_client._types import (
    GenerateResult,
    LoRAUpdateResult,
    MetaInfo,
    ModelCard,
    ModelInfo,
    ServerInfo,
    StreamChunk,
)

_SERVER_INFO_TIMEOUT_S = 5.0


class AsyncEngineClient:
    """Async client of one engine (or SGLang) base URL; use as `async with`, or call aclose()."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_MAX_RETRIES,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
        incremental_streaming: bool | None = None,
        http_client: httpx.AsyncClient | None = None,
        api_key: str | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key or None
        """Sent as `Authorization: Bearer <key>` (SGLang's --api-key, the embedded engine's engine.api_key)."""
        self.timeout = timeout
        self.max_retries = max_retries
        self.connect_timeout = connect_timeout
        self._incremental = incremental_streaming
        self._owns_http = http_client is None
        self._http = http_client or httpx.AsyncClient(base_url=self.base_url, timeout=timeout)
        self._background: set[asyncio.Task[None]] = set()

    def with_options(self, *, timeout: float | None = None, max_retries: int | None = None) -> AsyncEngineClient:
        """A client sharing this one's connections, with another default deadline or retry count."""
        other = AsyncEngineClient(
            self.base_url,
            timeout=self.timeout if timeout is None else timeout,
            max_retries=self.max_retries if max_retries is None else max_retries,
            connect_timeout=self.connect_timeout,
            incremental_streaming=self._incremental,
            http_client=self._http,
            api_key=self.api_key,
        )
        other._owns_http = False
        return other

    def _headers(self, deadline: float | None = None) -> dict[str, str]:
        """Trace context and request id, the engine's key when one is set, and the seconds left before `deadline`
        (loop time) when given."""
        headers = telemetry.inject({})
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        if deadline is not None:
            headers[DEADLINE_HEADER] = f"{max(deadline - asyncio.get_running_loop().time(), 0.001):.3f}"
        return headers

    async def __aenter__(self) -> AsyncEngineClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Waits for pending aborts, then closes the connections this client opened."""
        if self._background:
            await asyncio.wait(self._background, timeout=ABORT_TIMEOUT_S)
        if self._owns_http:
            await self._http.aclose()

    # ------------------------------------------------------------ generation

    async def generate(
        self,
        *,
        text: str | None = None,
        input_ids: list[int] | None = None,
        sampling_params: Mapping[str, Any] | None = None,
        lora_path: str | None = None,
        rid: str | None = None,
        timeout: float | None = None,
        extra_body: Mapping[str, Any] | None = None,
    ) -> GenerateResult:
        """Runs one generation to the end (POST /generate, stream false)."""
        body = _generate_body(text, input_ids, sampling_params, lora_path, rid, False, extra_body)
        deadline = self._deadline(timeout)
        try:
            response = await self._request("POST", "/generate", body, deadline, retries=self.max_retries)
        except BaseException as exc:
            if _may_be_running(exc):
                self._abort_in_background(body["rid"])
            raise
        return GenerateResult.model_validate(response.json())

    def generate_stream(
        self,
        *,
        text: str | None = None,
        input_ids: list[int] | None = None,
        sampling_params: Mapping[str, Any] | None = None,
        lora_path: str | None = None,
        rid: str | None = None,
        timeout: float | None = None,
        extra_body: Mapping[str, Any] | None = None,
    ) -> GenerateStream:
        """Streams one generation (POST /generate, stream true); the request starts on first read."""
        body = _generate_body(text, input_ids, sampling_params, lora_path, rid, True, extra_body)
        return GenerateStream(body["rid"], self._stream(body, timeout))

    async def _stream(self, body: dict[str, Any], timeout: float | None) -> AsyncIterator[StreamChunk]:
        rid = body["rid"]
        deadline = self._deadline(timeout)
        finished = False
        got_token = False
        attempt = 0
        try:
            incremental = await self._is_incremental(deadline)
            while True:
                try:
                    async with self._open_stream(body, deadline) as response:
                        text, ids = "", []
                        async for event in _events(response, deadline):
                            _raise_on_error_frame(event)
                            chunk = _chunk(event, text, ids, incremental)
                            text, ids = chunk.text, chunk.output_ids
                            got_token = got_token or bool(chunk.output_ids)
                            finished = chunk.finished
                            yield chunk
                    if not finished:
                        raise EngineUnavailableError(f"the stream of request {rid} ended before the request finished")
                    return
                except EngineClientError as exc:
                    if got_token or not exc.retryable or attempt >= self.max_retries:
                        raise
                    attempt += 1
                    await _backoff(attempt, deadline, exc)
        except BaseException as exc:
            if not finished and _may_be_running(exc):
                await self._abort_quietly(rid)
            raise

    def _open_stream(self, body: dict[str, Any], deadline: float) -> _OpenStream:
        return _OpenStream(self, body, deadline)

    # ------------------------------------------------------------ control

    async def abort(self, rid: str, *, timeout: float | None = None) -> None:
        """Asks the engine to stop request `rid` (POST /abort_request); unknown rids are fine."""
        await self._request("POST", "/abort_request", {"rid": rid}, self._deadline(timeout or ABORT_TIMEOUT_S))

    async def load_lora_adapter(
        self, lora_name: str, lora_path: str, *, pinned: bool = False, timeout: float | None = None
    ) -> LoRAUpdateResult:
        """Loads an adapter directory under `lora_name`; EngineBadRequestError if the engine refuses."""
        body = {"lora_name": lora_name, "lora_path": lora_path, "pinned": pinned}
        response = await self._request("POST", "/load_lora_adapter", body, self._deadline(timeout))
        return LoRAUpdateResult.model_validate(response.json())

    async def unload_lora_adapter(self, lora_name: str, *, timeout: float | None = None) -> LoRAUpdateResult:
        """Unloads `lora_name`; EngineBadRequestError if it is not loaded."""
        body = {"lora_name": lora_name}
        response = await self._request("POST", "/unload_lora_adapter", body, self._deadline(timeout))
        return LoRAUpdateResult.model_validate(response.json())

    # ------------------------------------------------------------ information

    async def server_info(self, *, timeout: float | None = None) -> ServerInfo:
        """GET /server_info (falls back to SGLang's older /get_server_info)."""
        return ServerInfo.model_validate(await self._get_json("/server_info", "/get_server_info", timeout))

    async def model_info(self, *, timeout: float | None = None) -> ModelInfo:
        """GET /model_info (falls back to SGLang's older /get_model_info)."""
        return ModelInfo.model_validate(await self._get_json("/model_info", "/get_model_info", timeout))

    async def list_models(self, *, timeout: float | None = None) -> list[ModelCard]:
        """GET /v1/models: the base model, then one card per loaded adapter."""
        response = await self._request("GET", "/v1/models", None, self._deadline(timeout))
        return [ModelCard.model_validate(card) for card in response.json().get("data", [])]

    async def metrics(self, *, timeout: float | None = None) -> str:
        """GET /metrics: the Prometheus text."""
        return (await self._request("GET", "/metrics", None, self._deadline(timeout))).text

    async def health(self, *, generate: bool = False, timeout: float | None = 30.0) -> bool:
        """True when /health (or /health_generate) answers 200; False otherwise, never raises."""
        path = "/health_generate" if generate else "/health"
        try:
            await self._request("GET", path, None, self._deadline(timeout))
        except EngineClientError:
            return False
        return True

    # ------------------------------------------------------------ plumbing

    def _deadline(self, timeout: float | None) -> float:
        return asyncio.get_running_loop().time() + (self.timeout if timeout is None else timeout)

    def _httpx_timeout(self, deadline: float) -> httpx.Timeout:
        remaining = max(deadline - asyncio.get_running_loop().time(), 0.001)
        return httpx.Timeout(remaining, connect=min(self.connect_timeout, remaining))

    async def _get_json(self, path: str, fallback: str, timeout: float | None) -> Any:
        deadline = self._deadline(timeout)
        try:
            return (await self._request("GET", path, None, deadline)).json()
        except EngineClientError as exc:
            if exc.status_code != 404:
                raise
            return (await self._request("GET", fallback, None, deadline)).json()

    async def _request(
        self, method: str, path: str, body: Any, deadline: float, *, retries: int = 0
    ) -> httpx.Response:
        attempt = 0
        while True:
            try:
                return await _until(deadline, self._send(method, path, body, deadline))
            except EngineClientError as exc:
                if not exc.retryable or attempt >= retries:
                    raise
                attempt += 1
                await _backoff(attempt, deadline, exc)

    async def _send(self, method: str, path: str, body: Any, deadline: float) -> httpx.Response:
        try:
            response = await self._http.request(
                method, path, json=body, headers=self._headers(deadline if path == "/generate" else None),
                timeout=self._httpx_timeout(deadline),
            )
        except httpx.HTTPError as exc:
            raise _transport_error(self.base_url + path, exc) from exc
        if response.status_code >= 400:
            raise _status_error(response.status_code, response.content)
        return response

    async def _is_incremental(self, deadline: float) -> bool:
        if self._incremental is None:
            remaining = deadline - asyncio.get_running_loop().time()
            info = await self.server_info(timeout=max(min(remaining, _SERVER_INFO_TIMEOUT_S), 0.001))
            self._incremental = info.incremental_streaming_output
        return self._incremental

    def _abort_in_background(self, rid: str) -> None:
        task = asyncio.ensure_future(self._send_abort(rid))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _abort_quietly(self, rid: str) -> None:
        """Sends /abort_request even from a cancelled task; never raises."""
        task = asyncio.ensure_future(self._send_abort(rid))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        try:
            await asyncio.shield(task)
        except BaseException:  # noqa: BLE001 - cancelled again: the task still runs
            pass

    async def _send_abort(self, rid: str) -> None:
        try:
            await self.abort(rid, timeout=ABORT_TIMEOUT_S)
        except EngineClientError:
            pass


class GenerateStream:
    """The chunks of one streamed generation; leaving early (break, aclose, cancel) aborts it."""

    def __init__(self, rid: str, chunks: AsyncIterator[StreamChunk]):
        self.rid = rid
        self._chunks = chunks

    def __aiter__(self) -> GenerateStream:
        return self

    async def __anext__(self) -> StreamChunk:
        return await self._chunks.__anext__()

    async def __aenter__(self) -> GenerateStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stops reading; the engine is told to abort the request if it had not finished."""
        await self._chunks.aclose()  # type: ignore[attr-defined]


class _OpenStream:
    """`async with`: POST /generate with stream true; raises the mapped error on a non-200."""

    def __init__(self, client: AsyncEngineClient, body: dict[str, Any], deadline: float):
        self._client = client
        self._body = body
        self._deadline = deadline
        self._manager: Any = None

    async def __aenter__(self) -> httpx.Response:
        client = self._client
        self._manager = client._http.stream(
            "POST", "/generate", json=self._body, headers=client._headers(self._deadline),
            timeout=client._httpx_timeout(self._deadline),
        )
        try:
            response = await _until(self._deadline, self._manager.__aenter__())
        except httpx.HTTPError as exc:
            raise _transport_error(client.base_url + "/generate", exc) from exc
        if response.status_code < 400:
            return response
        try:
            content = await _until(self._deadline, response.aread())
        finally:
            await self._manager.__aexit__(None, None, None)
        raise _status_error(response.status_code, content)

    async def __aexit__(self, *exc: Any) -> None:
        await self._manager.__aexit__(*exc)


# ---------------------------------------------------------------- helpers


def _generate_body(
    text: str | None,
    input_ids: list[int] | None,
    sampling_params: Mapping[str, Any] | None,
    lora_path: str | None,
    rid: str | None,
    stream: bool,
    extra_body: Mapping[str, Any] | None,
) -> dict[str, Any]:
    if (text is None) == (input_ids is None):
        raise ValueError("pass exactly one of text or input_ids")
    body: dict[str, Any] = {**(extra_body or {}), "rid": rid or uuid.uuid4().hex, "stream": stream}
    if text is not None:
        body["text"] = text
    else:
        body["input_ids"] = list(input_ids or [])
    body["sampling_params"] = dict(sampling_params or {})
    if lora_path is not None:
        body["lora_path"] = lora_path
    return body


def _may_be_running(exc: BaseException) -> bool:
    """Whether the engine may still be working on a request that failed with `exc` (then abort it)."""
    if isinstance(exc, EngineClientError):
        return exc.status_code is None and not exc.retryable  # an answer or an unsent request: nothing runs
    return True  # cancelled, or stopped early by the caller


async def _until(deadline: float, awaitable: Any) -> Any:
    """Awaits `awaitable` until `deadline` (loop time); EngineTimeoutError after it."""
    try:
        async with asyncio.timeout_at(deadline):
            return await awaitable
    except TimeoutError:
        raise EngineTimeoutError("the call's deadline passed before the engine answered") from None


_SSE_LINE_END = re.compile(r"\r\n|\r|\n")


async def _sse_lines(response: httpx.Response) -> AsyncIterator[str]:
    """The lines of an SSE body, split where the SSE format ends a line (CRLF, LF or CR) and nowhere else.

    Why not `aiter_lines`: it splits like `str.splitlines`, also at U+0085, U+2028 and U+2029, which JSON
    carries unescaped (SGLang's orjson and the embedded engine both send them raw); a generated token holding one
    cut an event in two, and the half was read as JSON."""
    pending = ""
    async for text in response.aiter_text():
        parts = _SSE_LINE_END.split(pending + text)
        pending = parts.pop()
        for part in parts:  # a CRLF cut between two chunks gives one more empty line: no data line, so read past
            yield part
    if pending:
        yield pending


async def _events(response: httpx.Response, deadline: float) -> AsyncIterator[dict[str, Any]]:
    """The JSON objects of an SSE body, up to `data: [DONE]`."""
    lines = _sse_lines(response)
    while True:
        try:
            line = await _until(deadline, lines.__anext__())
        except StopAsyncIteration:
            return
        except httpx.HTTPError as exc:
            raise _transport_error(str(response.url), exc) from exc
        if not line.startswith("data:"):
            continue
        payload = line[len("data:") :].strip()
        if payload == "[DONE]":
            return
        try:
            event = json.loads(payload)
        except json.JSONDecodeError as exc:
            raise EngineClientError(f"{response.url} sent a stream event that is not JSON ({exc}): {payload[:120]!r}",
                                    status_code=502) from None
        yield event


def _chunk(event: dict[str, Any], text: str, ids: list[int], incremental: bool) -> StreamChunk:
    new_text = event.get("text") or ""
    new_ids = list(event.get("output_ids") or [])
    if incremental:
        delta, delta_ids = new_text, new_ids
        new_text, new_ids = text + new_text, ids + new_ids
    else:
        delta, delta_ids = new_text[len(text) :], new_ids[len(ids) :]
    return StreamChunk(
        text=new_text,
        delta=delta,
        output_ids=new_ids,
        delta_output_ids=delta_ids,
        meta_info=MetaInfo.model_validate(event.get("meta_info") or {"id": ""}),
    )


def _raise_on_error_frame(event: dict[str, Any]) -> None:
    """Raises for `data: {"error": ...}`, and for SGLang's streamed refusal (queue full: 503), an
    abort chunk carrying a status code."""
    error = event.get("error")
    if error is not None:
        code = error.get("code") if isinstance(error, dict) else None
        raise make_status_error(code if isinstance(code, int) and code >= 400 else 500, event)
    reason = (event.get("meta_info") or {}).get("finish_reason") or {}
    status = reason.get("status_code") if reason.get("type") == "abort" else None
    if isinstance(status, int) and status >= 400:
        raise make_status_error(status, {"error": {"message": reason.get("message") or "aborted"}})


def _status_error(status_code: int, content: bytes) -> EngineClientError:
    try:
        body: Any = json.loads(content)
    except ValueError:
        body = content.decode(errors="replace")
    return make_status_error(status_code, body)


def _transport_error(url: str, exc: httpx.HTTPError) -> EngineClientError:
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        return EngineUnavailableError(f"cannot connect to {url}: {exc!r}", retryable=True)  # nothing was sent
    if isinstance(exc, httpx.TimeoutException):
        return EngineTimeoutError(f"{url} timed out: {exc!r}")
    return EngineUnavailableError(f"connection to {url} failed: {exc!r}")


async def _backoff(attempt: int, deadline: float, last: EngineClientError) -> None:
    """Sleeps before retry `attempt` (exponential, jittered); re-raises `last` if the deadline is nearer."""
    delay = min(INITIAL_RETRY_DELAY_S * 2 ** (attempt - 1), MAX_RETRY_DELAY_S) * (0.5 + random.random() / 2)
    if asyncio.get_running_loop().time() + delay >= deadline:
        raise last
    await asyncio.sleep(delay)
