"""One store read per request fills the placement snapshot; this router's load is published apart.

Load layout: one hash `load` whose fields are `<router id>|<replica>` → that router's in-flight
requests on the replica, and `<router id>|@` → when it last published (ms). Each router writes
absolute counts (never increments), so a lost write or a Redis restart heals at the next
publish, and a crashed router's counts stop counting once its heartbeat is `stale_s` old.
The read sums the live routers' counts, using this router's own live counts for itself.

Spread layout: one hash per window, `spread:<window number>`, whose fields are `<router id>|<replica>` → the
sessions that router placed there in that window. The read sums the other routers' fields and takes this
router's own counts from process memory, exact at the moment of the read: a count read back from the store could
not say whether this router's write in flight was already in it, and counting it twice made a head's holder look
a session fuller than it was (the `max_excess` bound then sent the head's next session elsewhere). Own counts are
written absolute too, at each placement and again with every load publish while they are in a counted window, so
a write lost to the store's deadline (the first turns of a burst, on a loaded machine) heals within a heartbeat
instead of hiding those sessions from the other routers for two windows.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import Awaitable, Callable, Mapping, Sequence

from macaron.router.kv_index.index import EPOCH_KEY
from macaron.router.kv_index.keys import KEY_PREFIX as KV_PREFIX
from macaron.router.kv_index.pending import PendingClaims
from macaron.router.placement.shared_counts import SharedCounts
from macaron.router.placement.types import PlacementRequest, Snapshot
from macaron.router.prefix_index import PrefixIndex, block_keys, matched_blocks, now_ms
from macaron.store import Store, StoreUnavailableError
from macaron.store.base import HashOp

log = logging.getLogger(__name__)
LOAD_KEY = "load"
HEARTBEAT_FIELD = "@"
SPREAD_KEY = "spread"
"""`spread:<window number>`: a hash of `<router id>|<replica>` → sessions that router placed there in that window
(the spread scorer's). A field without a router id (an older router's) counts as another router's."""
RECENT_PLACEMENTS_S = 60.0
"""How long this router remembers its own session placements for `SnapshotReader.caught_up` (far longer than
a snapshot waits to be used)."""


def spread_window(now: int, window_s: float) -> int:
    """The spread window a time falls in (ms clock)."""
    return int(now // max(1, int(window_s * 1000)))


def spread_keys(now: int, window_s: float) -> tuple[str, str]:
    """The current window's key and the previous one's (ms clock)."""
    n = spread_window(now, window_s)
    return f"{SPREAD_KEY}:{n}", f"{SPREAD_KEY}:{n - 1}"


def others_sessions(rows: Sequence[Mapping[str, bytes]], router_id: str) -> Counter[str]:
    """Sessions per replica in spread rows, summed over every router but `router_id`."""
    out: Counter[str] = Counter()
    for row in rows:
        for name, value in row.items():
            router, sep, replica = name.partition("|")
            if not sep:
                router, replica = "", name
            if router != router_id:
                out[replica] += _stamp(value)
    return out


def _stamp(value: bytes | None) -> int:
    try:
        return int(value) if value is not None else 0
    except ValueError:
        return 0


@dataclass(slots=True)
class _LocalPlan:
    """What a placement read from this process's copies knows before any store call, and what it still needs."""

    now: int
    precise: dict[str, int]
    approx: dict[str, int]
    share: dict[str, float]
    predicted: dict[str, int]
    claim_keys: list[str]
    keys: list[str]
    """The shared counts' hashes (none for round robin)."""
    rows: list[dict[str, bytes]] | None
    """Their kept rows, when young enough; None: to be read."""


class LoadTracker:
    """This router's in-flight requests per replica, and the task that publishes them."""

    def __init__(self, store: Store, router_id: str, *, heartbeat_s: float = 2.0, stale_s: float = 10.0,
                 coalesce_s: float = 0.02) -> None:
        if "|" in router_id:
            raise ValueError("router_id may not contain '|'")
        self.store = store
        self.router_id = router_id
        self.heartbeat_s = heartbeat_s
        self.stale_s = stale_s
        self.coalesce_s = coalesce_s
        """Changes within this window go out in one write (keeps bursts off the event loop)."""
        self.local: Counter[str] = Counter()
        self.also_publish: list[Callable[[], Awaitable[None]]] = []
        """Writes of this router's other counts that ride on the load's publisher (its heartbeat heals lost ones)."""
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def begin(self, replica: str) -> None:
        self.local[replica] += 1
        self._changed.set()

    def end(self, replica: str) -> None:
        self.local[replica] = max(0, self.local[replica] - 1)
        self._changed.set()

    def in_flight(self) -> dict[str, int]:
        """This router's requests in flight per replica (replicas with none left out)."""
        return {r: n for r, n in self.local.items() if n}

    def fields(self) -> dict[str, bytes]:
        out = {f"{self.router_id}|{r}": str(n).encode() for r, n in self.local.items()}
        out[f"{self.router_id}|{HEARTBEAT_FIELD}"] = str(now_ms()).encode()
        return out

    async def publish(self) -> None:
        await self.store.hset(LOAD_KEY, self.fields(), max(self.stale_s * 3, 30.0))

    def merge(self, raw: Mapping[str, bytes], now: int) -> dict[str, int]:
        """Every live router's counts summed per replica (this router's own taken live)."""
        horizon = now - int(self.stale_s * 1000)
        live: set[str] = set()
        for name, value in raw.items():
            router, _, what = name.partition("|")
            if what == HEARTBEAT_FIELD and router != self.router_id:
                try:
                    if int(value) >= horizon:
                        live.add(router)
                except ValueError:
                    pass
        total: Counter[str] = Counter({r: n for r, n in self.local.items() if n})
        for name, value in raw.items():
            router, _, replica = name.partition("|")
            if router in live and replica != HEARTBEAT_FIELD:
                try:
                    total[replica] += max(0, int(value))
                except ValueError:
                    pass
        return dict(total)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="load-publisher")

    async def stop(self) -> None:
        """Ends the publisher (bounded: Python 3.11's wait_for can swallow one cancellation)."""
        self._stopping = True
        self._changed.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=2.0)
            self._task = None

    async def _run(self) -> None:
        while not self._stopping:
            try:
                await asyncio.wait_for(self._changed.wait(), self.heartbeat_s)
            except asyncio.TimeoutError:
                pass
            if self._changed.is_set() and self.coalesce_s > 0:
                await asyncio.sleep(self.coalesce_s)
            self._changed.clear()
            if self._stopping:
                return
            try:
                await self.publish()
                for write in self.also_publish:
                    await write()
            except StoreUnavailableError:
                pass  # the gate reports it; the next change or heartbeat republishes
            except Exception:  # noqa: BLE001 - the publisher never dies
                log.exception("publishing load failed")


class SnapshotReader:
    """Reads load and the request's blocks in one round trip; degrades to this router's own view."""

    def __init__(self, store: Store, tracker: LoadTracker, *, prefix_ttl_s: float,
                 index: PrefixIndex | None = None, spread_window_s: float = 300.0,
                 pending: PendingClaims | None = None, counts: SharedCounts | None = None,
                 local_depths: Callable[[Sequence[str]], dict[str, int]] | None = None,
                 head_min_share: float = 1.0) -> None:
        self.store = store
        self.counts = counts
        """Load and spread rows kept in process (None: read with every request)."""
        self.local_depths = local_depths
        """This process's copy of the KV-cache index (`KVIndexWriter.depths`): read instead of the store's when a
        request's replicas all publish events (`PlacementRequest.approximate` off)."""
        self.head_min_share = head_min_share
        """Claims are read only while no replica holds this share of the prompt (`with_claims` ignores them then)."""
        self.pending = pending
        """Pending head claims, read with the KV index's depths (None: not read)."""
        self.spread_window_s = spread_window_s
        self._own: dict[int, Counter[str]] = {}
        """Spread window number → sessions this router placed per replica in it (the current and previous ones):
        what this router's own fields in the store say once its writes land, counted here at once and exactly."""
        self._live: dict[str, tuple[int, str]] = {}
        """Session key → (window, replica) where it is counted: the latest window it sent a turn in (this one or
        the one before; older entries are dropped)."""
        self._pruned_at = -1
        self._placed: deque[tuple[float, str]] = deque()
        """(when, monotonic; replica) of the sessions this router placed in the last RECENT_PLACEMENTS_S."""
        self.tracker = tracker
        tracker.also_publish.append(self.publish_sessions)
        self.prefix_ttl_s = prefix_ttl_s
        self.index = index
        """Its in-process overlay is merged into what the store says (and used alone while it is down)."""
        self._down: dict[str, float] = {}
        self.started_ms: dict[str, int] = {}
        """When each replica without KV-cache events last started (ms): the approximate index forgets older entries."""
        self.retention_ms: dict[str, int] = {}
        """Per replica without KV-cache events, how long it is believed to keep a prefix: its capacity model,
        learned from the cached_tokens its responses report (see `learn`)."""

    def _not_before(self, now: int) -> dict[str, int]:
        out = dict(self.started_ms)
        for r, keep in self.retention_ms.items():
            out[r] = max(out.get(r, 0), now - keep)
        return out

    def learn(self, replica: str, *, age_ms: int, overclaimed: bool) -> None:
        """Feedback from one response: an over-claim at `age_ms` means the replica keeps prefixes less long
        than that (its cache is smaller than what it was sent); a right claim lets the belief grow back."""
        ttl_ms = int(self.prefix_ttl_s * 1000)
        current = self.retention_ms.get(replica, ttl_ms)
        if overclaimed:
            self.retention_ms[replica] = max(1000, min(current, int(age_ms * 0.8)))
        elif age_ms >= current * 0.5:
            self.retention_ms[replica] = min(ttl_ms, int(current * 1.1) + 1000)

    def mark_down(self, replica: str, cooldown_s: float = 5.0) -> None:
        """This router saw `replica` fail: the healthy filter skips it for `cooldown_s`."""
        self._down[replica] = time.monotonic() + cooldown_s

    def down(self) -> frozenset[str]:
        now = time.monotonic()
        for r in [r for r, t in self._down.items() if t <= now]:
            del self._down[r]
        return frozenset(self._down)

    async def read(self, request: PlacementRequest, *, with_load: bool = True) -> Snapshot:
        """Load, the KV-cache index's epochs and blocks, the head's pending claims, and the approximate index's
        blocks (unless `request.approximate` is off: engine truth covers every replica): one round trip."""
        hashes, kv = request.block_hashes, request.kv_keys
        now = now_ms()
        if self.local_depths is not None and kv and not request.approximate:
            return await self._read_local(request, now, with_load)
        spread = list(spread_keys(now, self.spread_window_s)) if with_load else []
        head = ([LOAD_KEY] if with_load else []) + spread
        keys = head + (block_keys(hashes) if request.approximate else [])
        if not keys and not kv:
            return Snapshot(down=self.down())
        claims: Mapping[str, int] = {}
        claim_keys = self.pending.keys(kv) if self.pending is not None and kv else []
        try:
            if claim_keys:  # the depths and the claims are counted by the store: one small reply
                rows, precise, claims = await self.store.hgetall_many_depths_and_claims(
                    keys, EPOCH_KEY, [KV_PREFIX + k for k in kv], claim_keys)
            elif kv:  # the KV index's depths are counted by the store: one small reply, not a hash per block
                rows, precise = await self.store.hgetall_many_and_depths(keys, EPOCH_KEY, [KV_PREFIX + k for k in kv])
            else:
                rows, precise = await self.store.hgetall_many(keys), {}
        except StoreUnavailableError:
            local = self.tracker.in_flight()
            known = self.index.overlay(hashes, ()) if self.index is not None else ()
            approx = matched_blocks(known, now=now, ttl_s=self.prefix_ttl_s, not_before=self._not_before(now))
            share, predicted = self._estimates(request, approx, {})
            return Snapshot(load=local, own_load=local, prefix=approx, total_blocks=len(hashes), down=self.down(),
                            degraded=True,
                            prefix_share=share, predicted_tokens=predicted, sessions=dict(self.own_sessions(now)),
                            claimed=self.pending.merge(kv, {}) if claim_keys and self.pending else {},
                            counted_at=time.monotonic())
        load = self.tracker.merge(rows[0], now) if with_load else {}
        sessions = self.own_sessions(now) if with_load else Counter()
        sessions.update(others_sessions(rows[1:1 + len(spread)], self.tracker.router_id))
        stored = tuple(rows[len(head): len(head) + len(hashes)])
        known = self.index.overlay(hashes, stored) if self.index is not None else stored
        approx = matched_blocks(known, now=now, ttl_s=self.prefix_ttl_s, not_before=self._not_before(now))
        share, predicted = self._estimates(request, approx, precise)
        ages = {r: now - _stamp(known[n - 1].get(r)) for r, n in approx.items() if r not in precise and n}
        return Snapshot(
            load=load,
            own_load=self.tracker.in_flight() if with_load else {},
            prefix={**{r: n for r, n in approx.items() if r not in precise}, **precise},
            total_blocks=len(hashes),
            down=self.down(),
            blocks_seen=stored,
            precise=frozenset(precise),
            prefix_share=share,
            predicted_tokens=predicted,
            approx_age_ms=ages,
            sessions=dict(sessions),
            claimed=self.pending.merge(kv, claims) if claim_keys and self.pending else {},
            counted_at=time.monotonic(),
        )

    def read_at_once(self, request: PlacementRequest, *, with_load: bool = True) -> Snapshot | None:
        """The snapshot, when it needs no store call (engine truth in process, the shared counts kept and young
        enough, no claims to read): computed here, without a task or a turn of the event loop. None: `read`."""
        if self.local_depths is None or not request.kv_keys or request.approximate:
            return None
        plan = self._local_plan(request, now_ms(), with_load)
        if plan.claim_keys or (plan.rows is None and plan.keys):
            return None
        return self._local_snapshot(request, plan, {}, degraded=False)

    def _local_plan(self, request: PlacementRequest, now: int, with_load: bool) -> _LocalPlan:
        assert self.local_depths is not None
        hashes, kv = request.block_hashes, request.kv_keys
        precise = self.local_depths(kv)
        known = self.index.overlay(hashes, ()) if self.index is not None else ()
        approx = matched_blocks(known, now=now, ttl_s=self.prefix_ttl_s, not_before=self._not_before(now))
        approx = {r: n for r, n in approx.items() if r not in precise}
        share, predicted = self._estimates(request, approx, precise)
        claim_keys: list[str] = []
        if (self.pending is not None and request.session_replica is None
                and not any(v >= self.head_min_share for v in share.values())):
            claim_keys = self.pending.keys(kv)
        keys = [LOAD_KEY, *spread_keys(now, self.spread_window_s)] if with_load else []
        rows = self.counts.cached(keys) if self.counts is not None and keys and not request.fresh_counts else None
        return _LocalPlan(now, precise, approx, share, predicted, claim_keys, keys, rows)

    async def _read_local(self, request: PlacementRequest, now: int, with_load: bool) -> Snapshot:
        """Engine truth from this process's copy of the index, load and spread from the shared counts' rows (kept
        in process, renewed beside the traffic), and the store only for what no copy holds: the head's pending
        claims, while no replica holds the head, and the counts when they are too old. Most requests make no
        store round trip at all."""
        plan = self._local_plan(request, now, with_load)
        claims: Mapping[str, int] = {}
        try:
            if plan.claim_keys:  # one round trip: the claims, and the counts too when they are too old
                wanted = plan.keys if plan.rows is None else []
                at = time.monotonic()
                fresh, _, claims = await self.store.hgetall_many_depths_and_claims(wanted, EPOCH_KEY, [],
                                                                                   plan.claim_keys)
                if wanted:
                    plan.rows = fresh
                    if self.counts is not None:
                        self.counts.put(wanted, fresh, at)
            elif plan.rows is None and plan.keys:
                plan.rows = (await self.counts.read(plan.keys) if self.counts is not None
                             else await self.store.hgetall_many(plan.keys))
        except StoreUnavailableError:
            return self._local_snapshot(request, plan, {}, degraded=True)
        return self._local_snapshot(request, plan, claims, degraded=False)

    def _local_snapshot(self, request: PlacementRequest, plan: _LocalPlan, claims: Mapping[str, int], *,
                        degraded: bool) -> Snapshot:
        load: dict[str, int] = {}
        sessions = self.own_sessions(plan.now) if plan.keys else Counter()
        if degraded:
            load = self.tracker.in_flight()
        elif plan.rows:
            load = self.tracker.merge(plan.rows[0], plan.now)
            sessions.update(others_sessions(plan.rows[1:], self.tracker.router_id))
        kv = request.kv_keys
        return Snapshot(
            load=load,
            own_load=self.tracker.in_flight() if load else {},
            prefix={**plan.approx, **plan.precise},
            total_blocks=len(request.block_hashes),
            down=self.down(),
            degraded=degraded,
            precise=frozenset(plan.precise),
            prefix_share=plan.share,
            predicted_tokens=plan.predicted,
            sessions=dict(sessions),
            claimed=self.pending.merge(kv, claims) if plan.claim_keys and self.pending is not None else {},
            counted_at=time.monotonic(),
        )

    def count_session(self, replica: str, session: str | None = None) -> Awaitable[None] | None:
        """A turn of a session went to `replica`: the session counts as live there, here at once (this router's
        reads take their own counts from here); the returned write counts it in the store for the other routers.

        With `session` (its key) a session counts once, in the latest window it sent a turn in: a turn in a new
        window moves its count there from the window before (and from the replica it left, if it moved), so the
        sum a read takes over the current and the previous window holds every session that talked in them exactly
        once, whenever it started, and one that ended drops out one to two windows after its last turn. None: no
        write needed (counted in this window already). Without `session`, every call counts one more."""
        window = spread_window(now_ms(), self.spread_window_s)
        if window != self._pruned_at:
            self._pruned_at = window
            self._live = {k: v for k, v in self._live.items() if v[0] >= window - 1}
            for old in [n for n in self._own if n < window - 1]:
                del self._own[old]
        moved_only = False
        if session is not None:
            last = self._live.get(session)
            if last == (window, replica):
                return None
            if last is not None:
                counts = self._own.get(last[0])
                if counts is not None and counts.get(last[1], 0) > 0:
                    counts[last[1]] -= 1  # its count moves to this window (and replica)
                    moved_only = last[1] == replica
            self._live[session] = (window, replica)
        self._own.setdefault(window, Counter())[replica] += 1
        if moved_only:  # the same session on the same replica: the two windows' sum does not change
            return self.publish_sessions()
        now = time.monotonic()
        self._placed.append((now, replica))
        while self._placed and self._placed[0][0] < now - RECENT_PLACEMENTS_S:
            self._placed.popleft()
        return self.publish_sessions()

    def end_session(self, session: str) -> Awaitable[None] | None:
        """A session ended (its client said so): it stops counting at once where this router counted it, instead of
        one to two windows after its last turn; the returned write tells the other routers. None: this router did
        not count it (another router did, or it is gone already)."""
        last = self._live.pop(session, None)
        if last is None:
            return None
        counts = self._own.get(last[0])
        if counts is None or counts.get(last[1], 0) <= 0:
            return None
        counts[last[1]] -= 1
        return self.publish_sessions()

    def own_sessions(self, now: int) -> Counter[str]:
        """Sessions this router placed per replica in the spread windows a read at `now` (ms clock) counts."""
        window = spread_window(now, self.spread_window_s)
        out: Counter[str] = Counter()
        for n in (window, window - 1):
            out.update(self._own.get(n, {}))
        return out

    def caught_up(self, snapshot: Snapshot, request: PlacementRequest) -> Snapshot:
        """`snapshot` with what this router did since it was read: its own requests in flight now, the sessions it
        placed since their count, and its own head claims (each replica at the deeper of its own and the store's). Sessions that start together
        are decided side by side, each on a snapshot read before the others were placed; without this they all see
        the same empty replicas (and the same unclaimed head), and the first sessions of two applications can land
        together."""
        changes: dict[str, object] = {}
        own_now = self.tracker.in_flight()
        if snapshot.counted_at and own_now != dict(snapshot.own_load):
            load = Counter(snapshot.load)
            load.subtract(snapshot.own_load)
            load.update(own_now)
            changes["load"] = {r: n for r, n in load.items() if n > 0}
            changes["own_load"] = own_now
        if snapshot.counted_at and self._placed and self._placed[-1][0] > snapshot.counted_at:
            sessions = Counter(snapshot.sessions)
            for at, replica in reversed(self._placed):
                if at <= snapshot.counted_at:
                    break
                sessions[replica] += 1
            changes["sessions"] = dict(sessions)
        if self.pending is not None and request.kv_keys and request.session_replica is None:
            claimed = self.pending.merge(request.kv_keys, snapshot.claimed)
            if claimed != dict(snapshot.claimed):
                changes["claimed"] = claimed
        return dataclasses.replace(snapshot, **changes) if changes else snapshot  # type: ignore[arg-type]

    async def publish_sessions(self) -> None:
        """Writes this router's session counts of the windows a read counts (absolute, so a repeat heals a lost
        write); nothing when it placed none there."""
        window = spread_window(now_ms(), self.spread_window_s)
        router = self.tracker.router_id
        ops: list[HashOp] = [("set", f"{SPREAD_KEY}:{n}", {f"{router}|{r}": str(c).encode() for r, c in counts.items()})
                             for n, counts in self._own.items() if n >= window - 1 and counts]
        if ops:
            await self.store.hbatch(ops, self.spread_window_s * 2 + 60)

    @staticmethod
    def _estimates(request: PlacementRequest, approx: Mapping[str, int], precise: Mapping[str, int]
                   ) -> tuple[dict[str, float], dict[str, int]]:
        """Share of the prompt and cached tokens each replica is expected to hold."""
        share: dict[str, float] = {}
        predicted: dict[str, int] = {}
        if request.block_hashes:
            for r, n in approx.items():
                share[r] = n / len(request.block_hashes)
                chars = n * request.block_chars
                predicted[r] = (request.prompt_tokens * chars // request.prompt_chars) if request.prompt_chars else 0
        for r, n in precise.items():
            share[r] = n / len(request.kv_keys) if request.kv_keys else 0.0
            predicted[r] = n * request.block_tokens
        return share, predicted
