"""`MacaronClient` and `AsyncMacaronClient`: twins over the router's gRPC API.

    client = MacaronClient("127.0.0.1:50051", api_key="mk-...")
    result = client.chat.create(messages=[{"role": "user", "content": "Hi"}])
    print(result.route.specialist, result.text)

Both hold one channel; `with_options(...)` returns a copy with other defaults (timeout,
retries, key, metadata) over the same channel. `timeout` is the gRPC deadline of a whole call,
retries included. A call is retried, with exponential backoff, only when it failed before its first chunk
with UNAVAILABLE or RESOURCE_EXHAUSTED (429: over a limit, or overloaded): nothing can have
run, so sending it again is safe. A 429 waits the delay the server suggests (google.rpc.RetryInfo)
when it is at most a minute, as openai-python honours Retry-After; `retry_rate_limits=False`
hands 429s straight back (the gateway does, so its own callers see them and back off).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from collections.abc import Callable, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from macaron import telemetry
from macaron.sdk._constants import (
    API_KEY_ENV,
    DEFAULT_MAX_RETRIES,
    DEFAULT_TARGET,
    DEFAULT_TIMEOUT_S,
    INITIAL_RETRY_DELAY_S,
    MAX_RETRY_AFTER_S,
    MAX_RETRY_DELAY_S,
    TARGET_ENV,
)
from macaron.sdk._exceptions import APITimeoutError, error_from_rpc
from macaron.v1 import router_pb2_grpc

if TYPE_CHECKING:
    from macaron.sdk.resources.chat import AsyncChat, Chat
    from macaron.sdk.resources.completions import AsyncCompletions, Completions
    from macaron.sdk.resources.sessions import AsyncSessions, Sessions

ROUTER_SERVICE = "macaron.v1.Router"
_SHOULD_RETRY_KEY = "x-should-retry"
_NOT_GIVEN: Any = object()
T = TypeVar("T")
ClientT = TypeVar("ClientT", bound="_BaseClient")


class _BaseClient:
    """What both twins share: target, credentials, defaults, metadata and the retry policy."""

    def __init__(
        self,
        target: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_MAX_RETRIES,
        tls: bool = False,
        root_certificates: bytes | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        metadata: Mapping[str, str] | None = None,
        channel_options: list[tuple[str, Any]] | None = None,
        retry_rate_limits: bool = True,
    ) -> None:
        self.target = target or os.environ.get(TARGET_ENV) or DEFAULT_TARGET
        self.api_key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        self.timeout = timeout
        self.max_retries = max_retries
        self.tls = tls or root_certificates is not None or credentials is not None
        self._root_certificates = root_certificates
        self._credentials = credentials
        self.default_metadata = dict(metadata or {})
        self._channel_options = list(channel_options or [])
        self.retry_rate_limits = retry_rate_limits
        if timeout <= 0 or max_retries < 0:
            raise ValueError("timeout must be positive and max_retries at least 0")

    def _channel_credentials(self) -> grpc.ChannelCredentials | None:
        if self._credentials is not None:
            return self._credentials
        return grpc.ssl_channel_credentials(self._root_certificates) if self.tls else None

    def _copy(self: ClientT, **changes: Any) -> ClientT:
        clone = object.__new__(type(self))
        clone.__dict__.update({k: v for k, v in self.__dict__.items() if k not in ("chat", "completions", "_stub")})
        for key, value in changes.items():
            if value is not _NOT_GIVEN:
                setattr(clone, key, value)
        clone._owns_channel = False
        return clone

    def _options(self, timeout: float | None, metadata: Mapping[str, str] | None) -> tuple[float, dict[str, str]]:
        merged = {**self.default_metadata, **(metadata or {})}
        return (timeout if timeout is not None else self.timeout), merged

    def request_metadata(self, request_id: str, extra: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
        """The call's metadata: API key, request id, W3C trace context, then defaults and `extra`."""
        carrier: dict[str, str] = {}
        telemetry.inject(carrier)
        carrier.update({k.lower(): v for k, v in self.default_metadata.items()})
        carrier.update({k.lower(): v for k, v in (extra or {}).items()})
        carrier[telemetry.REQUEST_ID_KEY] = request_id
        if self.api_key:
            carrier["authorization"] = f"Bearer {self.api_key}"
        return list(carrier.items())

    @staticmethod
    def new_request_id(request_id: str | None) -> str:
        """The caller's id (checked: it travels as gRPC metadata), else the bound one, else a new one."""
        if request_id and telemetry.clean_request_id(request_id) != request_id:
            raise ValueError(
                f"request_id must be printable ASCII without spaces, at most {telemetry.MAX_REQUEST_ID_LENGTH} "
                f"characters (it travels as gRPC metadata); got {request_id[:40]!r}"
            )
        return request_id or telemetry.current_request_id() or uuid.uuid4().hex

    def _should_retry(self, exc: grpc.RpcError, attempt: int, max_retries: int) -> bool:
        code = exc.code()  # type: ignore[attr-defined]
        retryable = code == grpc.StatusCode.UNAVAILABLE or (
            code == grpc.StatusCode.RESOURCE_EXHAUSTED and self.retry_rate_limits)
        if attempt >= max_retries or not retryable:
            return False
        trailers = dict(exc.trailing_metadata() or ())  # type: ignore[attr-defined]
        if str(trailers.get(_SHOULD_RETRY_KEY, "true")).lower() == "false":
            return False
        suggested = _suggested_delay(exc)
        return suggested is None or suggested <= MAX_RETRY_AFTER_S

    @staticmethod
    def _retry_delay(attempt: int, exc: grpc.RpcError | None = None) -> float:
        """The server's suggested delay when it gave one, else exponential backoff with jitter."""
        suggested = _suggested_delay(exc) if exc is not None else None
        if suggested is not None:
            return suggested
        delay = min(INITIAL_RETRY_DELAY_S * 2**attempt, MAX_RETRY_DELAY_S)
        return delay * (1 - 0.25 * random.random())


def _suggested_delay(exc: grpc.RpcError) -> float | None:
    """Seconds a RESOURCE_EXHAUSTED answer asks to wait (RetryInfo or retry-after-ms), else None."""
    if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:  # type: ignore[attr-defined]
        return None
    return error_from_rpc(exc).retry_after_s


class MacaronClient(_BaseClient):
    """Synchronous client of the Macaron router (gRPC)."""

    def __init__(self, target: str | None = None, **kwargs: Any) -> None:
        super().__init__(target, **kwargs)
        credentials = self._channel_credentials()
        self._channel: grpc.Channel = (
            grpc.secure_channel(self.target, credentials, options=self._channel_options)
            if credentials is not None
            else grpc.insecure_channel(self.target, options=self._channel_options)
        )
        self._owns_channel = True

    @cached_property
    def chat(self) -> Chat:
        """Chat generation (`create`) and routing decisions (`classify`)."""
        from macaron.sdk.resources.chat import Chat

        return Chat(self)

    @cached_property
    def completions(self) -> Completions:
        """Plain-prompt completions (`create`), OpenAI's legacy completions through the router."""
        from macaron.sdk.resources.completions import Completions

        return Completions(self)

    @cached_property
    def sessions(self) -> Sessions:
        """The end of a conversation kept under a session id (`end`)."""
        from macaron.sdk.resources.sessions import Sessions

        return Sessions(self)

    @cached_property
    def _stub(self) -> router_pb2_grpc.RouterStub:
        return router_pb2_grpc.RouterStub(self._channel)

    def with_options(
        self,
        *,
        timeout: float = _NOT_GIVEN,
        max_retries: int = _NOT_GIVEN,
        api_key: str | None = _NOT_GIVEN,
        metadata: Mapping[str, str] = _NOT_GIVEN,
        retry_rate_limits: bool = _NOT_GIVEN,
    ) -> MacaronClient:
        """A copy with other defaults, sharing this client's channel (closing the copy keeps it open)."""
        return self._copy(
            timeout=timeout,
            max_retries=max_retries,
            api_key=api_key,
            default_metadata=dict(metadata) if metadata is not _NOT_GIVEN else _NOT_GIVEN,
            retry_rate_limits=retry_rate_limits,
        )

    copy = with_options

    def _with_retries(self, attempt_fn: Callable[[float], T], *, timeout: float, max_retries: int, request_id: str) -> T:
        """Runs `attempt_fn(remaining_s)` until it succeeds or may not be retried."""
        deadline = time.monotonic() + timeout
        attempt = 0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise APITimeoutError("the deadline passed while retrying", code=grpc.StatusCode.DEADLINE_EXCEEDED, request_id=request_id)
            try:
                return attempt_fn(remaining)
            except grpc.RpcError as exc:
                if not self._should_retry(exc, attempt, max_retries):
                    raise error_from_rpc(exc, request_id=request_id) from None
                time.sleep(min(self._retry_delay(attempt, exc), max(deadline - time.monotonic(), 0)))
                attempt += 1

    def health(self, *, timeout: float = 5.0) -> bool:
        """True when the router answers SERVING to the standard gRPC health check."""
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        try:
            reply = health_pb2_grpc.HealthStub(self._channel).Check(
                health_pb2.HealthCheckRequest(service=ROUTER_SERVICE), timeout=timeout
            )
        except grpc.RpcError:
            return False
        return reply.status == health_pb2.HealthCheckResponse.SERVING

    def close(self) -> None:
        """Closes the channel (only the client that opened it does)."""
        if self._owns_channel:
            self._channel.close()

    def __enter__(self) -> MacaronClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncMacaronClient(_BaseClient):
    """asyncio client of the Macaron router (gRPC); the channel opens on first use, in the running loop.

    `channel` gives a ready channel instead (the Ray Serve gateway passes one that travels over a
    Serve handle); the client then never opens one of its own.
    """

    def __init__(self, target: str | None = None, *, channel: grpc.aio.Channel | None = None, **kwargs: Any) -> None:
        super().__init__(target, **kwargs)
        self._holder: dict[str, grpc.aio.Channel] = {} if channel is None else {"channel": channel}
        self._owns_channel = True

    @cached_property
    def chat(self) -> AsyncChat:
        """Chat generation (`create`) and routing decisions (`classify`)."""
        from macaron.sdk.resources.chat import AsyncChat

        return AsyncChat(self)

    @cached_property
    def completions(self) -> AsyncCompletions:
        """Plain-prompt completions (`create`), OpenAI's legacy completions through the router."""
        from macaron.sdk.resources.completions import AsyncCompletions

        return AsyncCompletions(self)

    @cached_property
    def sessions(self) -> AsyncSessions:
        """The end of a conversation kept under a session id (`end`)."""
        from macaron.sdk.resources.sessions import AsyncSessions

        return AsyncSessions(self)

    @property
    def _channel(self) -> grpc.aio.Channel:
        channel = self._holder.get("channel")
        if channel is None:
            credentials = self._channel_credentials()
            channel = (
                grpc.aio.secure_channel(self.target, credentials, options=self._channel_options)
                if credentials is not None
                else grpc.aio.insecure_channel(self.target, options=self._channel_options)
            )
            self._holder["channel"] = channel
        return channel

    @property
    def _stub(self) -> router_pb2_grpc.RouterStub:
        return router_pb2_grpc.RouterStub(self._channel)

    def with_options(
        self,
        *,
        timeout: float = _NOT_GIVEN,
        max_retries: int = _NOT_GIVEN,
        api_key: str | None = _NOT_GIVEN,
        metadata: Mapping[str, str] = _NOT_GIVEN,
        retry_rate_limits: bool = _NOT_GIVEN,
    ) -> AsyncMacaronClient:
        """A copy with other defaults, sharing this client's channel (closing the copy keeps it open)."""
        return self._copy(
            timeout=timeout,
            max_retries=max_retries,
            api_key=api_key,
            default_metadata=dict(metadata) if metadata is not _NOT_GIVEN else _NOT_GIVEN,
            retry_rate_limits=retry_rate_limits,
        )

    copy = with_options

    async def _with_retries(self, attempt_fn: Callable[[float], Any], *, timeout: float, max_retries: int, request_id: str) -> Any:
        """Awaits `attempt_fn(remaining_s)` until it succeeds or may not be retried."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        attempt = 0
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise APITimeoutError("the deadline passed while retrying", code=grpc.StatusCode.DEADLINE_EXCEEDED, request_id=request_id)
            try:
                return await attempt_fn(remaining)
            except grpc.RpcError as exc:
                if not self._should_retry(exc, attempt, max_retries):
                    raise error_from_rpc(exc, request_id=request_id) from None
                await asyncio.sleep(min(self._retry_delay(attempt, exc), max(deadline - loop.time(), 0)))
                attempt += 1

    async def health(self, *, timeout: float = 5.0) -> bool:
        """True when the router answers SERVING to the standard gRPC health check."""
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        try:
            reply = await health_pb2_grpc.HealthStub(self._channel).Check(
                health_pb2.HealthCheckRequest(service=ROUTER_SERVICE), timeout=timeout
            )
        except grpc.RpcError:
            return False
        return reply.status == health_pb2.HealthCheckResponse.SERVING

    async def close(self) -> None:
        """Closes the channel (only the client that opened it does)."""
        channel = self._holder.pop("channel", None) if self._owns_channel else None
        if channel is not None:
            await channel.close()

    async def __aenter__(self) -> AsyncMacaronClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

