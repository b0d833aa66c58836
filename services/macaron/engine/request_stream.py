"""The async iterator a caller gets from AsyncLLMEngine.submit: cumulative outputs of one request.

Leaving the iteration before the final output (break + aclose, a cancelled task, a dropped
client) aborts the request on the engine thread, which frees its row and cache references.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, AsyncIterator

from macaron.engine.protocol import RequestOutput

if TYPE_CHECKING:
    from macaron.engine.async_engine import AsyncLLMEngine


class AsyncRequestStream:
    """Cumulative outputs of one request; leaving the iteration early aborts the request."""

    def __init__(self, rid: str, engine: AsyncLLMEngine) -> None:
        self.rid = rid
        self._engine = engine
        self._queue: asyncio.Queue[RequestOutput | BaseException] = asyncio.Queue()
        self._finished = False

    def _put(self, item: RequestOutput | BaseException) -> None:
        self._queue.put_nowait(item)

    def __aiter__(self) -> AsyncIterator[RequestOutput]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[RequestOutput]:
        try:
            while not self._finished:
                item = await self._queue.get()
                if isinstance(item, BaseException):
                    self._finished = True
                    raise item
                if item.finished:
                    self._finished = True
                yield item
        finally:
            if not self._finished:
                self._finished = True
                self._engine._post(("abort", self.rid, "the client went away"))

    async def abort(self) -> None:
        if not self._finished:
            await self._engine.abort(self.rid)


def abort_output(rid: str, message: str) -> RequestOutput:
    """A final output for a request that ended without running (refused late, shut down)."""
    return RequestOutput(
        rid=rid,
        output_ids=[],
        text="",
        finished=True,
        finish_reason={"type": "abort", "message": message},
        prompt_tokens=0,
        completion_tokens=0,
        cached_tokens=0,
        e2e_latency=0.0,
    )
