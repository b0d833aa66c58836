"""`Stream` / `AsyncStream`: iterators over one Router.Generate call's chunks.

A stream is returned once the first chunk arrived (the route decision), so errors that happen
before any output (bad input, auth, limits) are raised by `create()` itself, and retries of
UNAVAILABLE happen before the caller sees anything. `close()` cancels the call down to the
engine. Every chunk the stream yields is also folded into `get_final_result()`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc

from macaron.sdk._convert import Accumulator, chunk_from_proto
from macaron.sdk._exceptions import error_from_rpc
from macaron.sdk.types import ChatChunk, ChatResult, Route
from macaron.v1 import common_pb2 as pb


class _StreamBase:
    def __init__(self, call: Any, first: pb.GenerateChunk | None, request_id: str, *, logprobs: bool = False) -> None:
        self._call = call
        self._pending = chunk_from_proto(first) if first is not None else None
        self._acc = Accumulator(logprobs)
        self._closed = False
        self.request_id = request_id
        """The request id the call carried (also in every hop's logs)."""
        self.route: Route | None = self._pending.route if self._pending is not None else None
        """The route decision (the first chunk's), known as soon as the stream exists."""

    def _take(self, chunk: ChatChunk) -> ChatChunk:
        self._acc.add(chunk)
        return chunk


class Stream(_StreamBase):
    """A synchronous stream of ChatChunk; use as a context manager or call close()."""

    def __iter__(self) -> Iterator[ChatChunk]:
        if self._pending is not None:
            chunk, self._pending = self._pending, None
            yield self._take(chunk)
        try:
            for message in self._call:
                yield self._take(chunk_from_proto(message))
        except grpc.RpcError as exc:
            if self._closed and exc.code() == grpc.StatusCode.CANCELLED:
                return
            raise error_from_rpc(exc, request_id=self.request_id) from None

    def get_final_result(self) -> ChatResult:
        """Reads the rest of the stream and returns the whole answer (chunks already read included)."""
        for _ in self:
            pass
        return self._acc.result()

    def close(self) -> None:
        """Cancels the call (the router, the specialist and the engine stop working on it)."""
        if not self._closed:
            self._closed = True
            self._call.cancel()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncStream(_StreamBase):
    """An asyncio stream of ChatChunk; use as an async context manager or call close()."""

    def __aiter__(self) -> AsyncIterator[ChatChunk]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ChatChunk]:
        if self._pending is not None:
            chunk, self._pending = self._pending, None
            yield self._take(chunk)
        while not self._closed:
            try:
                message = await self._call.read()
            except asyncio.CancelledError:
                if self._closed:
                    return
                raise
            except grpc.RpcError as exc:
                if self._closed and exc.code() == grpc.StatusCode.CANCELLED:
                    return
                raise error_from_rpc(exc, request_id=self.request_id) from None
            if message is grpc.aio.EOF:
                return
            yield self._take(chunk_from_proto(message))

    async def get_final_result(self) -> ChatResult:
        """Reads the rest of the stream and returns the whole answer (chunks already read included)."""
        async for _ in self:
            pass
        return self._acc.result()

    async def close(self) -> None:
        """Cancels the call (the router, the specialist and the engine stop working on it)."""
        if not self._closed:
            self._closed = True
            self._call.cancel()

    async def __aenter__(self) -> AsyncStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
