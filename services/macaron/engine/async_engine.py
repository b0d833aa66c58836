"""AsyncLLMEngine: the AsyncEngine protocol over LLMEngine, stepping in one background thread.

`submit_async` tokenises, validates and compiles any grammar in a small worker pool (never on
the event loop: a new JSON schema takes long enough to stall every stream and /health), then
drops the prepared request into an inbox; the engine thread drains the inbox between steps
(adds, aborts, adapter commands), steps while there is work and hands each step's outputs to
asyncio with one call_soon_threadsafe. torch releases the GIL during the forward pass, so the
event loop stays responsive. When queued work cannot run yet, the thread sleeps until woken.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

import torch

from macaron.engine.args import EngineArgs
from macaron.engine.engine import LLMEngine
from macaron.engine.protocol import (
    EngineNotReadyError,
    EngineOverloadedError,
    EngineStats,
    GenerateRequest,
    InvalidRequestError,
    MemoryUsage,
    RequestOutput,
)
from macaron.engine.request_stream import AsyncRequestStream, abort_output
from macaron.engine.sequence import Sequence

log = logging.getLogger(__name__)


class AsyncLLMEngine:
    """Implements macaron.engine.protocol.AsyncEngine for the HTTP server."""

    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self.args = engine.args
        self.tokenizer = engine.tokenizer
        self._inbox: deque[tuple[Any, ...]] = deque()
        self._wake = threading.Event()
        self._streams: dict[str, AsyncRequestStream] = {}
        self._num_queued = 0
        """Requests submitted and not yet running (inbox + engine waiting queue)."""
        self._inbox_adds = 0
        """Adds posted to the inbox and not yet drained (guarded by _count_lock)."""
        self._preparing = 0
        """Requests being tokenised / compiled in the worker pool (guarded by _count_lock)."""
        self._inputs_pool: ThreadPoolExecutor | None = None
        self._count_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._running = False
        self._error: BaseException | None = None
        self._unload_waiters: dict[str, list[Future[None]]] = {}

    @classmethod
    def from_args(cls, args: EngineArgs) -> "AsyncLLMEngine":
        """Loads the model and adapters (model_path None: the tiny model and its four adapters)."""
        return cls(LLMEngine(args))

    # --- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        if self._running:
            return
        self._loop = asyncio.get_running_loop()
        self._running = True
        self._thread = threading.Thread(target=self._run, name="macaron-engine", daemon=True)
        self._thread.start()

    async def shutdown(self) -> None:
        if not self._running:
            return
        self._running = False
        self._wake.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
        self.engine.close()
        for rid, stream in list(self._streams.items()):
            stream._put(abort_output(rid, "the engine is shutting down"))
        self._streams.clear()
        if self._inputs_pool is not None:
            self._inputs_pool.shutdown(wait=False, cancel_futures=True)
            self._inputs_pool = None

    @property
    def is_ready(self) -> bool:
        return self._running and self._error is None

    # --- requests --------------------------------------------------------------------------
    def _check_admission(self, request: GenerateRequest) -> None:
        if not self.is_ready:
            raise EngineNotReadyError("the engine is not running" if self._error is None else f"engine failed: {self._error}")
        if request.rid in self._streams:
            raise InvalidRequestError(f"a request with rid {request.rid!r} is already running")
        if self._num_queued >= self.args.max_queued_requests:
            raise EngineOverloadedError(
                f"{self._num_queued} requests are waiting (max_queued_requests={self.args.max_queued_requests}); retry later"
            )

    def _enqueue(self, seq: Sequence) -> AsyncRequestStream:
        stream = AsyncRequestStream(seq.rid, self)
        self._streams[seq.rid] = stream
        with self._count_lock:
            self._num_queued += 1
            self._inbox_adds += 1
        self._post(("add", seq))
        return stream

    def submit(self, request: GenerateRequest) -> AsyncRequestStream:
        """Validates and enqueues in the caller's thread (tokenising included): for cheap requests
        (health probes, tests); servers use `submit_async`."""
        self._check_admission(request)
        return self._enqueue(self.engine.inputs.process(request))

    async def submit_async(self, request: GenerateRequest) -> AsyncRequestStream:
        """Like `submit`, but tokenising and grammar compilation run in a worker thread, so the
        event loop keeps serving other streams meanwhile. The rid and a queue place are held
        while the request is prepared, so duplicates and overload are refused as before."""
        self._check_admission(request)
        placeholder = AsyncRequestStream(request.rid, self)
        self._streams[request.rid] = placeholder
        with self._count_lock:
            self._num_queued += 1
            self._preparing += 1
        try:
            if self._inputs_pool is None:
                self._inputs_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="macaron-inputs")
            loop = asyncio.get_running_loop()
            seq = await loop.run_in_executor(self._inputs_pool, self.engine.inputs.process, request)
        finally:
            self._streams.pop(request.rid, None)
            with self._count_lock:
                self._num_queued -= 1
                self._preparing -= 1
        if not self.is_ready:
            raise EngineNotReadyError("the engine stopped while the request was prepared")
        return self._enqueue(seq)

    async def abort(self, rid: str) -> bool:
        if rid not in self._streams or not self.is_ready:
            return False
        return await self._call(lambda: self.engine.abort(rid)) is not None

    async def generate(self, request: GenerateRequest) -> RequestOutput:
        """Convenience: the final output of one request."""
        last = None
        async for last in self.submit(request):
            pass
        assert last is not None
        return last

    # --- adapters --------------------------------------------------------------------------
    async def load_lora_adapter(self, name: str, path: str, pinned: bool = False) -> None:
        adapter = await asyncio.to_thread(self._read_adapter, name, path)
        await self._call(lambda: self._register(adapter, pinned))

    def _read_adapter(self, name: str, path: str) -> Any:
        try:
            return self.engine.lora.read(name, path)
        except (OSError, ValueError) as exc:
            raise InvalidRequestError(str(exc)) from exc

    def _register(self, adapter: Any, pinned: bool) -> None:
        try:
            self.engine.lora.register(adapter, pinned=pinned)
        except ValueError as exc:
            raise InvalidRequestError(str(exc)) from exc

    async def unload_lora_adapter(self, name: str) -> None:
        """Returns once `name` is gone; running requests that use it finish first."""
        done: Future[None] = Future()

        def command() -> None:
            if self.engine.unload_adapter(name):
                done.set_result(None)
            else:
                self._unload_waiters.setdefault(name, []).append(done)

        await self._call(command)
        await asyncio.wrap_future(done)

    def kv_events_endpoint(self) -> str | None:
        """Where this engine publishes KV-cache events (the bound address), None when it does not."""
        publisher = self.engine.kv_events
        return publisher.endpoint if publisher is not None else None

    def loaded_adapters(self) -> dict[str, str]:
        return {name: a.path for name, a in list(self.engine.lora.adapters.items()) if not a.unloading}

    def memory_usage(self) -> MemoryUsage:
        return self.engine.memory_usage()

    def stats(self) -> EngineStats:
        s = self.engine.stats()
        s.num_queued = self._num_queued
        return s

    def model_info(self) -> dict[str, Any]:
        return self.engine.model_info()

    # --- the engine thread -----------------------------------------------------------------
    def _post(self, command: tuple[Any, ...]) -> None:
        self._inbox.append(command)
        self._wake.set()

    async def _call(self, fn: Callable[[], Any]) -> Any:
        """Runs `fn` on the engine thread between steps and returns its result (a RequestOutput
        result is also delivered to its stream)."""
        if not self.is_ready:
            raise EngineNotReadyError("the engine is not running")
        future: Future[Any] = Future()
        self._post(("call", fn, future))
        return await asyncio.wrap_future(future)

    def _run(self) -> None:
        try:
            with torch.inference_mode():
                while self._running:
                    outputs = self._drain_inbox()
                    if self.engine.has_unfinished():
                        outputs += self.engine.step()
                        if self.engine.last_step_idle:
                            # work is queued but nothing can run yet (e.g. every adapter slot is
                            # held): sleep until a command arrives instead of spinning
                            self._wake.wait(timeout=0.05)
                            self._wake.clear()
                    else:
                        self._wake.wait(timeout=0.5)
                        self._wake.clear()
                    self._count_queued()
                    self._finish_unloads()
                    if outputs:
                        self._deliver(outputs)
        except BaseException as exc:  # noqa: BLE001 - a dead engine must fail every stream, not hang
            log.exception("engine thread failed")
            self._error = exc
            self._deliver_error(exc)

    def _drain_inbox(self) -> list[RequestOutput]:
        outputs: list[RequestOutput] = []
        while self._inbox:
            command = self._inbox.popleft()
            kind = command[0]
            if kind == "add":
                with self._count_lock:
                    self._inbox_adds -= 1
                seq: Sequence = command[1]
                try:
                    self.engine.add_request(seq)
                except InvalidRequestError as exc:
                    outputs.append(abort_output(seq.rid, str(exc)))
            elif kind == "abort":
                out = self.engine.abort(command[1], command[2])
                if out is not None:
                    outputs.append(out)
            elif kind == "call":
                _, fn, future = command
                try:
                    result = fn()
                    if isinstance(result, RequestOutput):
                        outputs.append(result)
                    future.set_result(result)
                except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                    future.set_exception(exc)
        return outputs

    def _count_queued(self) -> None:
        with self._count_lock:
            self._num_queued = len(self.engine.scheduler.waiting) + self._inbox_adds + self._preparing

    def _finish_unloads(self) -> None:
        for name in self.engine.finish_unloads():
            for future in self._unload_waiters.pop(name, []):
                future.set_result(None)

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(self._dispatch, outputs)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            pass

    def _dispatch(self, outputs: list[RequestOutput]) -> None:
        for out in outputs:
            stream = self._streams.get(out.rid)
            if stream is None:
                continue
            if out.finished:
                del self._streams[out.rid]
            stream._put(out)

    def _deliver_error(self, exc: BaseException) -> None:
        def fail() -> None:
            for rid, stream in list(self._streams.items()):
                stream._put(abort_output(rid, f"engine failed: {exc}"))
            self._streams.clear()

        if self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(fail)
            except RuntimeError:
                pass
