"""Sessions and rate limits live apart from placement state: prefix churn under maxmemory cannot evict them.

Real redis-servers with a small memory cap: the state server runs `noeviction`, the placement
server `allkeys-lru` (as the chart configures them). The same churn on one `allkeys-lru` server
(the old single-store layout) does evict the session, so the test shows what the split buys.
"""

from __future__ import annotations

import os

from macaron.store import RedisStore

from router_service.redis_servers import evicted_keys, redis_server
from router_service.test_routing_core import Fixed, core, request

CHURN_BLOCKS = 12_000


async def _churn(c, blocks: int) -> None:
    """Prefix churn: the index records many distinct blocks on a replica, as a busy router does."""
    for start in range(0, blocks, 2000):
        hashes = [os.urandom(16).hex() for _ in range(2000)]
        await c.prefix_index.record(hashes, "http://a:1")


async def _served_session(c) -> None:
    route = await c.route(request("write a parser for this file format", session="s"))
    route.commit()
    route.release()
    await c.flush()
    assert await c.read_session("o", "s") is not None


async def test_prefix_churn_cannot_evict_a_session_or_reset_a_limit() -> None:
    with redis_server("4mb", "noeviction") as state_url, redis_server("1500kb", "allkeys-lru") as cache_url:
        state = RedisStore(state_url, timeout_s=2.0)
        cache = RedisStore(cache_url, timeout_s=2.0, key_prefix="macaron:placement:")
        c = core(Fixed("code", 0.95), state, cache=cache)
        await _served_session(c)
        limit = [await state.rate_limit("limit:key", 3, 600.0) for _ in range(4)]
        assert [r.allowed for r in limit] == [True, True, True, False]
        await _churn(c, CHURN_BLOCKS)
        assert evicted_keys(cache_url) > 0  # the placement server really was full and evicted
        assert await c.read_session("o", "s") is not None
        assert not (await state.rate_limit("limit:key", 3, 600.0)).allowed
        await c.aclose()
        await state.close()
        await cache.close()


async def test_one_lru_server_for_everything_loses_the_session() -> None:
    with redis_server("1500kb", "allkeys-lru") as url:
        store = RedisStore(url, timeout_s=2.0)
        c = core(Fixed("code", 0.95), store)
        await _served_session(c)
        await _churn(c, CHURN_BLOCKS)
        assert evicted_keys(url) > 0
        assert await c.read_session("o", "s") is None
        await c.aclose()
        await store.close()
