"""Placement decided by what the engines really cache: real engines publish KV-cache events, the router indexes them.

Two embedded engines (the tiny model, in this process, small KV caches) publish over ZeroMQ on
loopback; RoutingCore follows both (its follower, its writer, the placement store) and places
requests whose prompts it renders and tokenizes as the specialist does. Each scenario is built
so the approximate index and the prompt head's home replica point to the wrong replica: only
the engines' own events lead to the right one.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from types import SimpleNamespace

import pytest

from macaron.discovery import StaticSource
from macaron.engine import EngineArgs, GenerateRequest, LLMEngine, SamplingParams
from macaron.kv_events import BlockRemoved, BlockStored, KVEventBatch, lora_id_for
from macaron.prompting import ChatRequest, Message
from macaron.router.kv_index import KVIndexWriter, block_keys_of_tokens, matched_depths
from macaron.router.kv_index.index import EPOCH_KEY
from macaron.router.kv_index.keys import KEY_PREFIX
from macaron.router.placement.pickers import rendezvous
from macaron.router.prefix_index import KEY_PREFIX as PREFIX_KEY_PREFIX
from macaron.router.routing import AdapterRef, RouteRequest, RoutingCore
from macaron.router.settings import RouterSettings
from macaron.router.store_gate import GatedStore
from macaron.store import MemoryStore, RedisStore

NAMES = ("chat", "agent", "code", "ui")
REPLICAS = ["http://e0:1", "http://e1:1"]
SYSTEM = "You are the assistant of the harbour office. " * 12


# ------------------------------------------------------------------ the writer alone


async def test_writer_follows_stores_removals_clears_restarts_and_gaps() -> None:
    store = MemoryStore()
    w = KVIndexWriter(store, block_size=4, entry_ttl_s=60)
    tokens = list(range(100, 113))  # three full blocks and one token (never reused by the engine)
    keys = block_keys_of_tokens(tokens, block_size=4, lora_id=lora_id_for("chat"), max_blocks=64)
    assert len(keys) == 3

    async def depths() -> dict[str, int]:
        epochs, *rows = await store.hgetall_many([EPOCH_KEY, *(KEY_PREFIX + k for k in keys)])
        return matched_depths(rows, epochs)

    lid = lora_id_for("chat")
    await w.apply("r", 0, KVEventBatch(1.0, [BlockStored([1], None, tokens[:4], 4, lid),
                                             BlockStored([2, 3], 1, tokens[4:12], 4, lid)]))
    assert await depths() == {"r": 3}
    await w.apply("r", 1, KVEventBatch(2.0, [BlockRemoved([2])]))
    assert await depths() == {"r": 1}  # the chain breaks at the evicted block
    await w.apply("r", 2, KVEventBatch(3.0, [BlockStored([2], 1, tokens[4:8], 4, lid)]))
    assert await depths() == {"r": 3}  # block 3's entry is back in reach once 2 is stored again
    await w.apply("r", 0, KVEventBatch(4.0, []))  # the sequence went back: the engine restarted
    assert await depths() == {"r": 0}
    await w.apply("r", 1, KVEventBatch(5.0, [BlockStored([7], None, tokens[:4], 4, lid)]))
    assert await depths() == {"r": 1}
    await w.apply("r", 5, KVEventBatch(6.0, []))  # a gap: batches 2-4 are lost, nothing is trusted
    assert await depths() == {"r": 0}
    # another adapter's blocks never match, nor do blocks of another size
    await w.apply("r", 6, KVEventBatch(7.0, [BlockStored([8], None, tokens[:4], 4, lora_id_for("code")),
                                             BlockStored([9], None, tokens[:8], 8, lid)]))
    assert await depths() == {"r": 0}
    # a router that joins late continues from what the first one wrote
    await w.apply("r", 7, KVEventBatch(8.0, [BlockStored([1], None, tokens[:4], 4, lid)]))
    late = KVIndexWriter(store, block_size=4, entry_ttl_s=60)
    await late.apply("r", 8, KVEventBatch(9.0, [BlockStored([2], 1, tokens[4:8], 4, lid)]))
    assert await depths() == {"r": 2}
    # a replica that left (no longer discovered) is void, and stays so when it comes back
    await late.leave("r", now=10.0)
    assert await depths() == {"r": 0}
    back = KVIndexWriter(store, block_size=4, entry_ttl_s=60)
    await back.join("r", now=11.0, started_at=1.0)
    assert await depths() == {"r": 0}


# ------------------------------------------------------------------ real engines, real events


class Engines:
    """Engines in this process, each publishing on a loopback port of its own (a wildcard port binds, as in
    SGLang); `restart(i)` replaces one, which comes back on another port with a new start time."""

    def __init__(self, tiny_model, max_total_tokens: int) -> None:
        self.model = tiny_model
        self.max_total_tokens = max_total_tokens
        self.started = [time.time()] * len(REPLICAS)
        self.engines = [self._make(i) for i in range(len(REPLICAS))]

    def _make(self, i: int) -> LLMEngine:
        config = json.dumps({"publisher": "zmq", "endpoint": "tcp://127.0.0.1:*"})
        return LLMEngine(EngineArgs(model_path=str(self.model.model_dir), num_threads=1,
                                    lora_paths=[f"{n}={p}" for n, p in self.model.adapters.items()],
                                    max_total_tokens=self.max_total_tokens, kv_block_size=16,
                                    kv_events_config=config))

    def restart(self, i: int) -> None:
        self.engines[i].close()
        self.engines[i] = self._make(i)
        self.started[i] = time.time()

    async def server_info(self, replica: str) -> dict:
        i = REPLICAS.index(replica)
        return {"kv_events_endpoint": self.engines[i].kv_events.endpoint, "startup_time": self.started[i],
                "max_total_num_tokens": self.max_total_tokens}

    def serve(self, replica: str, token_ids: list[int], adapter: str = "chat") -> int:
        """Runs one request to the end on `replica`; returns the prompt tokens it served from its cache."""
        engine = self.engines[REPLICAS.index(replica)]
        seq = engine.add_request(GenerateRequest(uuid.uuid4().hex, token_ids, SamplingParams(temperature=0, max_new_tokens=2),
                                                 lora_path=adapter))
        while engine.has_unfinished():
            engine.step()
        return seq.num_cached_tokens

    def close(self) -> None:
        for engine in self.engines:
            engine.close()


@pytest.fixture
def engines(tiny_model):
    e = Engines(tiny_model, max_total_tokens=1024)
    yield e
    e.close()


def make_core(tokenizer, engines: Engines, store, **settings) -> RoutingCore:
    profiles = {n: SimpleNamespace(system_prompt=SYSTEM, tool_call_prefix="") for n in NAMES}
    rs = RouterSettings(**{"kv_events": {"refresh_s": 0.2}, **settings})
    return RoutingCore(rs, store=GatedStore(MemoryStore()), cache_store=GatedStore(store), profiles=profiles,
                       adapters={n: AdapterRef(n) for n in NAMES}, tokenizer=tokenizer,
                       discovery=StaticSource(REPLICAS), classifier=None, judge=None,
                       router_id=f"t{uuid.uuid4().hex[:6]}", server_info=engines.server_info)


def head_key(core: RoutingCore, request: ChatRequest) -> str:
    """The prompt's head block as placement keys its home and ties (past the specialist's profile prompt)."""
    return core.placement_request(RouteRequest(request, owner="o"), "chat").tie_key


def chat(*turns: str) -> ChatRequest:
    roles = ["user", "assistant"]
    return ChatRequest(tuple(Message(roles[i % 2], t) for i, t in enumerate(turns)))


def tokens_of(core: RoutingCore, request: ChatRequest) -> list[int]:
    return core.prompt_tokens(core.prompt_text(request, "chat"))


async def following(core: RoutingCore) -> None:
    await core.start()
    deadline = time.monotonic() + 10
    while len(core.kv_follower.readers) < len(REPLICAS):
        assert time.monotonic() < deadline, "the follower never connected"
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)  # ZeroMQ's slow-joiner window


async def settle(core: RoutingCore, before: int) -> None:
    """Waits until the writer applied a batch beyond `before` and the stream went quiet."""
    deadline = time.monotonic() + 20
    while core.kv_writer.applied <= before:
        assert time.monotonic() < deadline, "no KV-event batch arrived"
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.2)


async def place(core: RoutingCore, request: ChatRequest):
    route = await core.route(RouteRequest(request, owner="o", forced="chat", request_id=uuid.uuid4().hex))
    route.release()
    return route


def conversation(diverging: str) -> ChatRequest:
    return chat("Please summarise the shipment ledger for the northern region.", "Here is the summary you asked for.",
                f"Now compare it with {diverging} and list every difference you find in detail.")


async def test_a_long_shared_head_diverging_later_goes_where_the_engine_holds_the_tail(tokenizer, engines) -> None:
    core = make_core(tokenizer, engines, MemoryStore())
    try:
        await following(core)
        mine = conversation("the southern warehouse records of last quarter")
        home = rendezvous(head_key(core, mine), sorted(REPLICAS))
        other = next(r for r in REPLICAS if r != home)
        before = core.kv_writer.applied
        engines.serve(home, tokens_of(core, conversation("the budget forecast")))  # same head, other tail
        engines.serve(other, tokens_of(core, mine))  # this conversation so far
        await settle(core, before)
        follow_up = chat(*(m.content for m in mine.messages), "Noted.", "And which of them matter most?")
        route = await place(core, follow_up)
        share = route.snapshot.prefix_share
        assert route.snapshot.precise == frozenset(REPLICAS)
        assert share[other] > share[home] > 0  # both hold the head; only `other` holds the tail
        assert route.replica == other and route.index_source == "engine"
        cached = engines.serve(other, tokens_of(core, follow_up))
        assert cached >= route.predicted_cached_tokens > 0  # the index never claimed more than the engine had
        assert core.observe_cached(route, cached) is False
    finally:
        await core.aclose()
    # control: without the engines' events nothing tells the replicas apart but the head's home
    blind = make_core(tokenizer, engines, MemoryStore(), kv_events={"enabled": False})
    try:
        assert (await place(blind, follow_up)).replica == home
    finally:
        await blind.aclose()


async def test_with_every_replica_publishing_the_approximate_index_stays_out_of_the_store(tokenizer, engines) -> None:
    """Engine truth covers every replica: the approximate index's blocks are neither read nor written (store work
    and reply payload on every request for nothing); with one replica silent, they are, for that replica."""
    store = MemoryStore()
    core = make_core(tokenizer, engines, store)
    try:
        await following(core)
        assert core.kv_follower.follows_all()
        request = conversation("the harbour fees of the spring season")
        assert core.placement_request(RouteRequest(request, request_id="r"), "chat").approximate is False
        route = await place(core, request)
        route.commit()
        await core.flush()
        assert route.replica and route.index_source == "engine"
        assert not [k for k in store._values if k.startswith(PREFIX_KEY_PREFIX)]
    finally:
        await core.aclose()

    silent = REPLICAS[0]

    async def one_silent(replica: str) -> dict:
        info = await engines.server_info(replica)
        return {k: v for k, v in info.items() if k != "kv_events_endpoint"} if replica == silent else info

    store = MemoryStore()
    core = make_core(tokenizer, engines, store)
    core.kv_follower._server_info = one_silent
    try:
        await core.start()
        deadline = time.monotonic() + 10
        while silent not in core.kv_follower.plain or len(core.kv_follower.readers) < len(REPLICAS) - 1:
            assert time.monotonic() < deadline, "the follower never connected"
            await asyncio.sleep(0.05)
        assert not core.kv_follower.follows_all()
        route = await place(core, request)
        route.commit()
        await core.flush()
        assert [k for k in store._values if k.startswith(PREFIX_KEY_PREFIX)]  # the silent replica needs them
    finally:
        await core.aclose()


async def test_placement_reads_engine_truth_from_its_own_copy_with_no_store_read_in_its_path(tokenizer,
                                                                                          engines) -> None:
    """Each router applies every replica's events itself, so its in-process copy of the index says what the store
    says (the same depths for every replica, evictions included). While every replica publishes, a request whose
    head a replica holds is placed on that copy and on the shared counts kept in process: no store read in its
    path (the counts are renewed in the background)."""
    store = MemoryStore()
    core = make_core(tokenizer, engines, store)
    reads: list[str] = []
    for name in ("hgetall_many", "hgetall_many_and_depths", "hgetall_many_depths_and_claims"):
        def counted(*args, _name=name, _call=getattr(store, name), **kwargs):
            reads.append(_name)
            return _call(*args, **kwargs)
        setattr(store, name, counted)
    try:
        await following(core)
        request = conversation("the harbour fees of the spring season")
        holder = REPLICAS[1]
        before = core.kv_writer.applied
        engines.serve(holder, tokens_of(core, request))
        await settle(core, before)
        preq = core.placement_request(RouteRequest(request, request_id="r"), "chat")
        assert preq.approximate is False and preq.kv_keys
        rows = await store.hgetall_many([KEY_PREFIX + k for k in preq.kv_keys])
        (epochs,) = await store.hgetall_many([EPOCH_KEY])
        local = core.kv_writer.depths(preq.kv_keys)
        assert local == matched_depths(rows, epochs) and local[holder] == len(preq.kv_keys)

        await place(core, request)  # nothing kept yet: the counts are read inline, once
        reads.clear()
        inline = core.snapshots.counts.inline_reads
        route = await place(core, request)
        assert route.replica == holder and route.index_source == "engine"
        assert route.predicted_cached_tokens == len(preq.kv_keys) * preq.block_tokens
        assert core.snapshots.counts.inline_reads == inline
        assert "hgetall_many_and_depths" not in reads and "hgetall_many_depths_and_claims" not in reads

        before = core.kv_writer.applied  # other prompts evict it: the copy follows the engine's removals
        for i in range(12):
            engines.serve(holder, tokens_of(core, conversation(f"invoice batch {i} " * 30)))
        await settle(core, before)
        rows = await store.hgetall_many([KEY_PREFIX + k for k in preq.kv_keys])
        (epochs,) = await store.hgetall_many([EPOCH_KEY])
        local = core.kv_writer.depths(preq.kv_keys)
        assert local == matched_depths(rows, epochs) and local[holder] < len(preq.kv_keys)
    finally:
        await core.aclose()


DOC = "Berth schedule: " + " ".join(f"vessel {i} docks at quay {i % 7} on day {i % 5}." for i in range(20))
"""An application's long head (about 560 tokens with the system prompt), shared by every session of it."""


def app_session(i: int) -> ChatRequest:
    return chat(f"{DOC}\nQuestion {i}: which vessel docks first on day {i % 5}, and at which quay?")


async def start_session(core: RoutingCore, i: int):
    route = await core.route(RouteRequest(app_session(i), owner="o", forced="chat", session_id=f"s{i}",
                                          request_id=uuid.uuid4().hex))
    route.commit()
    route.release()
    await core.flush()
    return route


async def head_resident_off_its_home(core: RoutingCore, engines) -> tuple[str, str]:
    """Serve the application's first session on a replica other than its head's home; return (home, holder)."""
    await following(core)
    home = rendezvous(head_key(core, app_session(0)), sorted(REPLICAS))
    holder = next(r for r in REPLICAS if r != home)
    before = core.kv_writer.applied
    engines.serve(holder, tokens_of(core, app_session(0)))
    await settle(core, before)
    return home, holder


async def test_new_sessions_join_the_replica_holding_their_head_while_its_cache_has_room(tokenizer, engines) -> None:
    """The head is resident on one engine (its events say so), not on the head's home: the first two sessions of
    the application both go there (the second would be spread by session count alone), since the engine's
    1,024 KV tokens hold the head once and both sessions' expected histories."""
    core = make_core(tokenizer, engines, MemoryStore())
    try:
        home, holder = await head_resident_off_its_home(core, engines)
        for i in (1, 2):
            route = await start_session(core, i)
            assert route.replica == holder and route.snapshot.capacity == {r: 1024 for r in REPLICAS}
            assert route.predicted_cached_tokens >= 512  # the head
            before = core.kv_writer.applied
            assert engines.serve(holder, tokens_of(core, app_session(i))) >= route.predicted_cached_tokens
            await settle(core, before)
        assert route.snapshot.sessions.get(holder) == 1  # the second session joined a replica that had one
    finally:
        await core.aclose()


async def test_a_new_session_is_spread_when_the_holder_of_its_head_is_full(tokenizer, tiny_model) -> None:
    """The same head on an engine of 640 KV tokens: the head plus one session's expected history does not fit,
    so the new session goes to the other engine (and prefills the head there) instead of evicting."""
    engines = Engines(tiny_model, max_total_tokens=640)
    core = make_core(tokenizer, engines, MemoryStore())
    try:
        home, holder = await head_resident_off_its_home(core, engines)
        route = await start_session(core, 1)
        assert route.snapshot.prefix_share[holder] > 0.8 and route.snapshot.capacity[holder] == 640
        assert route.replica == home
    finally:
        await core.aclose()
        engines.close()


async def test_an_engine_that_evicted_or_restarted_is_no_longer_credited(tokenizer, tiny_model) -> None:
    engines = Engines(tiny_model, max_total_tokens=512)  # 32 blocks: a few other long prompts evict a conversation
    core = make_core(tokenizer, engines, MemoryStore())
    try:
        await following(core)
        mine = conversation("the southern warehouse records of last quarter")
        home = rendezvous(head_key(core, mine), sorted(REPLICAS))
        other = next(r for r in REPLICAS if r != home)
        before = core.kv_writer.applied
        engines.serve(other, tokens_of(core, mine))
        await settle(core, before)
        assert (await place(core, mine)).replica == other
        # evicted: `other` serves another adapter's long prompts until the conversation's blocks are reused
        before = core.kv_writer.applied
        for i in range(3):
            engines.serve(other, tokens_of(core, chat(f"Unrelated request {i}: " + "list the ledger entries. " * 20)),
                          adapter="code")
        await settle(core, before)
        route = await place(core, mine)
        assert route.snapshot.prefix_share.get(other, 0.0) == 0.0 and route.replica == home
        # restarted: the engine comes back empty; what the index knew of it is void
        before = core.kv_writer.applied
        engines.serve(other, tokens_of(core, mine))
        await settle(core, before)
        assert (await place(core, mine)).replica == other
        engines.restart(REPLICAS.index(other))
        before = core.kv_writer.applied
        await asyncio.sleep(0.5)  # the follower sees the new start time and follows again
        engines.serve(other, tokens_of(core, chat("A fresh start after the restart.")), adapter="code")
        await settle(core, before)
        route = await place(core, mine)
        assert route.snapshot.prefix_share.get(other, 0.0) == 0.0 and route.replica == home
        cached = engines.serve(route.replica, tokens_of(core, mine))
        assert cached >= route.predicted_cached_tokens
    finally:
        await core.aclose()
        engines.close()


async def test_a_router_that_starts_late_places_on_the_truth_only_with_a_shared_store(tokenizer, engines,
                                                                                      redis_url) -> None:
    prefix = f"test-kv-{uuid.uuid4().hex[:8]}:"
    first = make_core(tokenizer, engines, RedisStore(redis_url, timeout_s=2.0, key_prefix=prefix))
    mine = conversation("the southern warehouse records of last quarter")
    try:
        await following(first)
        home = rendezvous(head_key(first, mine), sorted(REPLICAS))
        other = next(r for r in REPLICAS if r != home)
        before = first.kv_writer.applied
        engines.serve(other, tokens_of(first, mine))
        await settle(first, before)
        # a second router replica starts now (scale-out, a restart): the blocks were stored before it followed
        shared = make_core(tokenizer, engines, RedisStore(redis_url, timeout_s=2.0, key_prefix=prefix))
        alone = make_core(tokenizer, engines, MemoryStore())
        try:
            await following(shared)
            await following(alone)
            assert (await place(shared, mine)).replica == other
            assert (await place(alone, mine)).replica == home
        finally:
            await shared.aclose()
            await alone.aclose()
    finally:
        await first.aclose()


# ------------------------------------------------------------------ missed batches: SGLang's replay socket


async def test_a_gap_in_the_sequence_is_filled_from_the_replay_socket_else_a_new_epoch() -> None:
    """The publisher (the embedded engine's, SGLang's protocol) keeps its last batches for replay; a follower
    that sees the sequence skip asks for the missed ones and applies them in order, so what it knew of the
    replica stays valid. Without a replay socket, the same gap drops everything known of the replica."""
    import socket

    from macaron.kv_events import KVEventsConfig
    from macaron.kv_events.publisher import ZmqEventPublisher
    from macaron.router.kv_index.settings import KVIndexSettings
    from macaron.router.kv_index.subscriber import KVEventFollower, fetch_replay, replay_of

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        replay_port = s.getsockname()[1]
    pub = ZmqEventPublisher(KVEventsConfig(publisher="zmq", endpoint="tcp://127.0.0.1:*",
                                           replay_endpoint=f"tcp://127.0.0.1:{replay_port}", buffer_steps=16))
    lid = lora_id_for("chat")
    tokens = list(range(200, 216))
    keys = block_keys_of_tokens(tokens, block_size=4, lora_id=lid, max_blocks=64)
    assert len(keys) >= 3  # a prompt's last token is never a cached block's, so 16 tokens look up 3 blocks
    batches = [KVEventBatch(1.0, [BlockStored([1], None, tokens[:4], 4, lid)]),
               KVEventBatch(2.0, [BlockStored([2], 1, tokens[4:8], 4, lid)]),
               KVEventBatch(3.0, [BlockStored([3], 2, tokens[8:12], 4, lid)]),
               KVEventBatch(4.0, [BlockStored([4], 3, tokens[12:16], 4, lid)])]
    from macaron.kv_events.wire import encode_batch

    try:
        for batch in batches:
            pub.publish(batch)
        info = {"kv_events_config": json.dumps({"publisher": "zmq", "endpoint": "tcp://*:5557",
                                                "replay_endpoint": f"tcp://*:{replay_port}"})}
        endpoint = replay_of("http://127.0.0.1:1", info)
        assert endpoint == f"tcp://127.0.0.1:{replay_port}"
        deadline = time.monotonic() + 10
        while True:  # the publisher thread sends (and buffers) asynchronously
            import zmq.asyncio

            ctx = zmq.asyncio.Context()
            got = await fetch_replay(ctx, endpoint, 1, timeout_s=2.0)
            ctx.term()
            if len(got) == 3 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        assert [s for s, _ in got] == [1, 2, 3]

        async def depths(store) -> dict[str, int]:
            epochs, *rows = await store.hgetall_many([EPOCH_KEY, *(KEY_PREFIX + k for k in keys)])
            return matched_depths(rows, epochs)

        for replay in (endpoint, None):
            store = MemoryStore()
            writer = KVIndexWriter(store, block_size=4, entry_ttl_s=60)

            async def no_replicas() -> list[str]:
                return []

            async def no_info(replica: str) -> dict:
                return {}

            follower = KVEventFollower(KVIndexSettings(), writer, no_replicas, no_info)
            if replay is not None:
                follower.replays["r"] = replay
            await follower.handle("r", 0, encode_batch(batches[0]))
            assert await depths(store) == {"r": 1}
            await follower.handle("r", 3, encode_batch(batches[3]))  # batches 1 and 2 never arrived
            if replay is not None:
                assert follower.replayed == 2 and await depths(store) == {"r": len(keys)}  # the whole chain
            else:
                assert follower.replayed == 0 and await depths(store) == {"r": 0}
            await follower.aclose()
    finally:
        pub.close()
