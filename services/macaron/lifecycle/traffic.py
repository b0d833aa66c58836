"""Steady session traffic against routers, recording which version served every turn.

Used by the rollout tests and `loadtest/bench_rollout.py`: `clients` concurrent callers each run
sessions of `turns` turns (a new session id each time), alternating between the given router
stubs turn by turn (so sessions cross router replicas). The version of a turn is the one its
first chunk reports (the specialist echoes the version it actually served with).
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Sequence

import grpc

from macaron.v1 import common_pb2 as pb
from macaron.v1 import router_pb2_grpc


@dataclass(frozen=True, slots=True)
class Turn:
    session: str
    turn: int
    version: str | None
    code: str
    started: float
    ended: float
    specialist: int = 0


@dataclass
class SessionTraffic:
    stubs: Sequence[router_pb2_grpc.RouterStub]
    clients: int = 4
    turns: int = 2
    prompt: str = "write python code that adds two numbers"
    max_new_tokens: int = 3
    timeout_s: float = 60.0
    pause_s: float = 0.0
    metadata: tuple[tuple[str, str], ...] = ()
    prefix: str = "s"
    results: list[Turn] = field(default_factory=list)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _sessions_started: int = 0

    def start(self) -> None:
        self._stop.clear()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._client(i)) for i in range(self.clients)]

    async def stop(self) -> None:
        """Lets every client finish its current session, then returns."""
        self._stop.set()
        await asyncio.gather(*self._tasks)

    @property
    def sessions_started(self) -> int:
        return self._sessions_started

    async def _client(self, index: int) -> None:
        n = 0
        while not self._stop.is_set():
            session = f"{self.prefix}-{index}-{n}"
            n += 1
            self._sessions_started += 1
            messages: list[pb.ChatMessage] = []
            for turn in range(self.turns):
                messages.append(pb.ChatMessage(role=pb.ROLE_USER, content=f"{self.prompt} (turn {turn})"))
                stub = self.stubs[(index + turn) % len(self.stubs)]
                request = pb.GenerateRequest(
                    session_id=session, messages=messages,
                    sampling=pb.SamplingParams(max_new_tokens=self.max_new_tokens, temperature=0.0))
                started = time.monotonic()
                version, code, text, kind = None, "OK", "", 0
                try:
                    async for chunk in stub.Generate(request, timeout=self.timeout_s, metadata=self.metadata):
                        if version is None and chunk.HasField("route"):
                            version, kind = chunk.route.adapter_version, chunk.route.specialist
                        text += chunk.text
                except grpc.aio.AioRpcError as exc:
                    code = exc.code().name
                self.results.append(Turn(session, turn, version, code, started, time.monotonic(), kind))
                messages.append(pb.ChatMessage(role=pb.ROLE_ASSISTANT, content=text or "ok"))
                if self.pause_s:
                    await asyncio.sleep(self.pause_s)

    # ------------------------------------------------------------ summaries

    def failed(self) -> list[Turn]:
        return [t for t in self.results if t.code != "OK"]

    def sessions(self) -> dict[str, list[Turn]]:
        by: dict[str, list[Turn]] = defaultdict(list)
        for t in self.results:
            by[t.session].append(t)
        return {k: sorted(v, key=lambda t: t.turn) for k, v in by.items()}

    def switched(self, allowed_from: frozenset[str] = frozenset()) -> list[str]:
        """Sessions whose version changed between turns (except away from `allowed_from` versions)."""
        out = []
        for name, turns in self.sessions().items():
            versions = [t.version for t in turns if t.code == "OK"]
            for a, b in zip(versions, versions[1:]):
                if a != b and a not in allowed_from:
                    out.append(name)
                    break
        return out
