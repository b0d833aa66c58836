"""Raw-HTTP helpers for the engine API tests: SSE frames and Prometheus values."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

TIMEOUT = httpx.Timeout(30.0, connect=5.0)


async def sse_frames(response: httpx.Response) -> list[str]:
    """The `data:` payloads of an SSE body, in order (`[DONE]` included)."""
    frames = []
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            frames.append(line[len("data:") :].strip())
    return frames


async def stream_generate(url: str, body: dict[str, Any]) -> tuple[int, list[str]]:
    """POST /generate with stream true; the status and the raw frames."""
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        async with http.stream("POST", url + "/generate", json={**body, "stream": True}) as response:
            if response.status_code != 200:
                await response.aread()
                return response.status_code, [response.text]
            return 200, await sse_frames(response)


async def metric(url: str, name: str) -> float:
    """The sum over all label sets of a sample named `name` on /metrics (0 when absent)."""
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        return _sum(name, (await http.get(url + "/metrics")).text)


def metric_sync(url: str, name: str) -> float:
    """metric() for code outside an event loop."""
    return _sum(name, httpx.get(url + "/metrics", timeout=TIMEOUT).text)


def _sum(name: str, text: str) -> float:
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                total += sample.value
    return total


async def wait_for_metric(url: str, name: str, predicate: Any, timeout: float = 5.0) -> float:
    """Polls `name` until predicate(value) holds; returns the last value either way."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    value = await metric(url, name)
    while not predicate(value) and loop.time() < deadline:
        await asyncio.sleep(0.05)
        value = await metric(url, name)
    return value


def decode(frames: list[str]) -> tuple[list[dict[str, Any]], bool]:
    """The JSON chunks of a stream and whether it ended with [DONE]."""
    done = bool(frames) and frames[-1] == "[DONE]"
    return [json.loads(f) for f in (frames[:-1] if done else frames)], done
