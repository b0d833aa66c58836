"""Driving the load: open loop (Poisson arrivals at a rate) or closed loop (N clients back to back).

Open loop sends at the given rate whatever the stack's latency (the way overload happens): each
arrival takes a session that is not waiting for an answer, or starts a new one. Closed loop keeps
`concurrency` sessions busy. Both stop sending at `duration_s` or `max_requests`, then wait for
the requests in flight, each bounded by its own deadline, so a run always ends.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import Callable

from macaron.loadgen.config import LoadConfig
from macaron.loadgen.report import LOST, LoadReport, RequestResult
from macaron.loadgen.transports import Transport, make_transport
from macaron.loadgen.workload import Session, Workload, load_dev_prompts

ResultHook = Callable[[RequestResult], None]


class _Run:
    def __init__(self, config: LoadConfig, workload: Workload, transport: Transport, on_result: ResultHook | None) -> None:
        self.config = config
        self.workload = workload
        self.transport = transport
        self.on_result = on_result
        self.results: list[RequestResult] = []
        self.t0 = time.monotonic()
        self.stop_at = self.t0 + config.duration_s
        self.in_flight = 0
        self.peak_in_flight = 0

    def may_send(self) -> bool:
        return time.monotonic() < self.stop_at and len(self.results) < self.config.max_requests

    async def turn(self, session: Session) -> RequestResult:
        """Sends the session's next turn under its deadline; records the answer in its history when ok."""
        result = RequestResult(session.session_id, session.turn, session.label, time.monotonic() - self.t0)
        self.results.append(result)
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            async with asyncio.timeout(self.config.timeout_s):
                await self.transport.send(session.next_messages(), session.session_id, result)
        except TimeoutError:
            result.outcome, result.detail = LOST, f"no answer within {self.config.timeout_s:g} s"
        except Exception as exc:  # noqa: BLE001 - any other failure is this request's outcome, not the run's end
            result.outcome, result.detail = f"client_error:{type(exc).__name__}", str(exc)[:300]
        finally:
            self.in_flight -= 1
        if result.ok:
            session.record(result.text)
        if self.on_result is not None:
            self.on_result(result)
        return result

    async def open_loop(self, rate: float) -> None:
        rng = random.Random(self.config.seed)
        idle: deque[Session] = deque()
        tasks: set[asyncio.Task[None]] = set()

        async def one(session: Session) -> None:
            result = await self.turn(session)
            if result.ok and not session.done:
                idle.append(session)

        next_at = time.monotonic()
        while self.may_send():
            session = idle.popleft() if idle else self.workload.new_session()
            task = asyncio.create_task(one(session))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            next_at += rng.expovariate(rate)
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        if tasks:
            await asyncio.gather(*tasks)

    async def closed_loop(self, concurrency: int) -> None:
        async def client() -> None:
            session = self.workload.new_session()
            while self.may_send():
                result = await self.turn(session)
                if not result.ok or session.done:
                    session = self.workload.new_session()

        await asyncio.gather(*(client() for _ in range(concurrency)))


async def run_load(config: LoadConfig, *, workload: Workload | None = None, on_result: ResultHook | None = None) -> LoadReport:
    """Runs one bounded load against a loopback target and returns what it measured."""
    config.validate()
    if workload is None:
        workload = Workload(load_dev_prompts(), turns=config.turns, seed=config.seed)
    transport = make_transport(config)
    run = _Run(config, workload, transport, on_result)
    try:
        if config.rate is not None:
            await run.open_loop(config.rate)
            mode = f"open loop {config.rate:g} req/s"
        else:
            await run.closed_loop(int(config.concurrency or 1))
            mode = f"closed loop x{config.concurrency}"
    finally:
        await transport.close()
    return LoadReport(run.results, time.monotonic() - run.t0, mode, config.transport,
                      meta={"peak_in_flight": run.peak_in_flight})
