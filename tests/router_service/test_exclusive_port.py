"""A router started on a port another router serves fails to start, instead of sharing the port.

gRPC's default (SO_REUSEPORT on) let the second bind succeed and split connections between the two
processes; a stale or doubled replica then answered a share of the traffic silently.
"""

from __future__ import annotations

import contextlib

import pytest

from macaron.grpc_server import exclusive_server
from macaron.router.server import RouterServer
from macaron.store import RedisStore


async def test_a_second_router_on_a_taken_port_fails_to_start(routers, settings, tokenizer, redis_url: str,
                                                              key_prefix: str) -> None:
    first, _ = await routers.start()
    second = RouterServer(settings, store=RedisStore(redis_url, timeout_s=0.25, key_prefix=key_prefix),
                          cache_store=RedisStore(redis_url, timeout_s=0.25, key_prefix=key_prefix),
                          classifier=None, tokenizer=tokenizer, port=first.port, serve_metrics=False)
    try:
        with pytest.raises(RuntimeError, match=f"could not bind 127.0.0.1:{first.port}: another process holds the port"):
            await second.start()
    finally:
        with contextlib.suppress(Exception):
            await second.aclose()


async def test_exclusive_servers_refuse_a_shared_port() -> None:
    first = exclusive_server()
    port = first.add_insecure_port("127.0.0.1:0")
    await first.start()
    try:
        with pytest.raises(RuntimeError, match="bind"):
            exclusive_server().add_insecure_port(f"127.0.0.1:{port}")
    finally:
        await first.stop(None)
