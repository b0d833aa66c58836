"""Throwaway redis-server processes with their own memory cap and eviction policy (for eviction tests)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest
import redis


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def redis_server(maxmemory: str, policy: str) -> Iterator[str]:
    """A redis-server on loopback with `maxmemory` and `maxmemory-policy`; yields its URL."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not on PATH (install Redis to run the eviction tests)")
    port = _free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                             "no", "--maxmemory", maxmemory, "--maxmemory-policy", policy],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = redis.Redis.from_url(url)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"redis-server on {port} did not start") from None
                time.sleep(0.05)
        client.close()
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def evicted_keys(url: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        return int(client.info("stats")["evicted_keys"])
    finally:
        client.close()
