"""Pending head claims: a replica counts as holding a head the moment a router sends it there.

The KV-cache index learns what a replica holds from its engine's events, which come after the prefill (seconds
on a busy machine). Sessions of one application that start together are all placed before that, so without
claims they are spread blind. A claim closes the gap: when a router places a request whose head no replica is
known to hold, it writes `kvpend:<block key>` → replica for the head's leading KV blocks (first writer wins,
with a TTL) in the shared placement store. Placement reads the claims in the same round trip as the residency
depths (`Store.hgetall_many_depths_and_claims`), and a claimed replica counts as holding those blocks for the
spread and prefix scorers until the engine's events confirm it or the claim expires. A request that continues a
session ignores claims: its own replica holds its history.

A claim counts to its owner's deepest claimed block (a replica claims block k only when it was sent blocks 0..k).
Every prompt of a specialist opens with the same profile prompt, whose first blocks were claimed (first writer
wins) by whichever replica first served that specialist, so a new head's claims start behind keys another replica
owns. Read as the run of keys owned by the first key's owner, as they once were, they counted as one block of that
other replica's, and a head's sessions that started together were spread blind.

This router's own claims are kept here too (until their TTL), so its next placement sees them before the write
lands, and while the store is down.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any, Callable, Coroutine, Mapping, Sequence

from macaron.router.placement.types import PlacementRequest, Snapshot
from macaron.store import Store, StoreUnavailableError
from macaron.store.base import claim_depths

CLAIM_PREFIX = "kvpend:"
LAND_PREFIX = "kvland:"
"""`kvland:<replica>` → the head key of the first new head a router sent there in the last `landing_s`."""
WRITE_DEADLINE_S = 1.0
"""A claim write is abandoned after this long (the store's own deadline is usually shorter): it never holds up a
request, and a lost claim only costs the grouping it would have given."""
MAX_LOCAL = 8192
"""Most block claims of this router's kept in process (expired ones are dropped first)."""


def deepest_claims(claims: Mapping[str, tuple[str, float]], keys: Sequence[str], now: float) -> dict[str, int]:
    """`claim_depths` (the store's reading) of this router's own live claims among `keys`."""
    live = (claims.get(key) for key in keys)
    return claim_depths([None if e is None or e[1] <= now else e[0].encode() for e in live])


def holds_head(snapshot: Snapshot, min_share: float) -> bool:
    """Whether some replica is known to hold `min_share` of the prompt (engine truth, or the approximate index)."""
    return any(share >= min_share for share in snapshot.prefix_share.values())


def with_claims(snapshot: Snapshot, request: PlacementRequest, min_share: float) -> Snapshot:
    """The snapshot the scorers see: the claimed replica holds its claimed blocks at least (prefix depth, share of
    the prompt and predicted tokens). Unchanged when the request continues a session (a claim never pulls a
    session away from its replica) or when some replica is already known to hold `min_share` of the prompt (the
    claim stood in for engine truth; once there is truth, the truth decides)."""
    if (not snapshot.claimed or request.session_replica is not None or not request.kv_keys
            or holds_head(snapshot, min_share)):
        return snapshot
    prefix, share, predicted = dict(snapshot.prefix), dict(snapshot.prefix_share), dict(snapshot.predicted_tokens)
    for replica, blocks in snapshot.claimed.items():
        blocks = min(blocks, len(request.kv_keys))
        prefix[replica] = max(prefix.get(replica, 0), blocks)
        share[replica] = max(share.get(replica, 0.0), blocks / len(request.kv_keys))
        predicted[replica] = max(predicted.get(replica, 0), blocks * request.block_tokens)
    return dataclasses.replace(snapshot, prefix=prefix, prefix_share=share, predicted_tokens=predicted)


class PendingClaims:
    """Writes this router's head claims to the store and remembers them until they expire."""

    def __init__(self, store: Store, *, ttl_s: float, max_blocks: int, landing_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self.landing_s = landing_s
        self.max_blocks = max_blocks
        self._clock = clock
        self._local: dict[str, tuple[str, float]] = {}
        """Block key → (replica, expiry on `clock`): this router's own claims."""

    @property
    def enabled(self) -> bool:
        return self.ttl_s > 0 and self.max_blocks > 0

    def keys(self, kv_keys: Sequence[str]) -> list[str]:
        """The store keys of a prompt's claimable blocks (its first `max_blocks`)."""
        return [CLAIM_PREFIX + k for k in kv_keys[: self.max_blocks]] if self.enabled else []

    def merge(self, kv_keys: Sequence[str], stored: Mapping[str, int]) -> dict[str, int]:
        """The claims a placement counts: the store's (every router's, first writer first) and this router's own
        (its write may not have landed yet, or the store is down), each replica at the deeper of the two.

        Both, not either: the store's reading often has a claim of the shared profile prompt's first blocks by
        another replica (made by an earlier session) and stops at the first key not written yet, while this router's
        own claim of the new head behind them is still on its way; taking the store's alone then hid it, and the
        head's next session, started a moment later on this router, was placed as if nobody held the head."""
        if not self.enabled:
            return dict(stored)
        merged = dict(stored)
        for replica, depth in deepest_claims(self._local, kv_keys[: self.max_blocks], self._clock()).items():
            merged[replica] = max(merged.get(replica, 0), depth)
        return merged

    def claim(self, kv_keys: Sequence[str], replica: str) -> Coroutine[Any, Any, None] | None:
        """Claims the prompt's head for `replica`: here at once, and returns the store write to run in the
        background (None when claims are off). First writer wins here as in the store."""
        if not self.enabled or not kv_keys:
            return None
        now = self._clock()
        if len(self._local) >= MAX_LOCAL:
            self._prune(now)
        expiry = now + self.ttl_s
        for key in kv_keys[: self.max_blocks]:
            entry = self._local.get(key)
            if entry is None or entry[1] <= now:
                self._local[key] = (replica, expiry)
        return self._write(list(kv_keys[: self.max_blocks]), replica)

    async def land(self, replica: str, head: str) -> str | None:
        """Takes `replica` for the new head `head` for `landing_s`, unless another new head took it first: returns
        that head's key (None: taken now, held by `head` already, landing off, or the store did not answer: a
        landing is a tie-break, never a reason to fail or wait)."""
        if self.landing_s <= 0 or not head:
            return None
        try:
            async with asyncio.timeout(WRITE_DEADLINE_S):
                held = await self.store.set_nx_get(LAND_PREFIX + replica, head.encode(), self.landing_s)
        except (TimeoutError, StoreUnavailableError):
            return None
        return None if held is None or held == head.encode() else held.decode(errors="replace")

    async def _write(self, kv_keys: list[str], replica: str) -> None:
        try:
            async with asyncio.timeout(WRITE_DEADLINE_S):
                await self.store.set_many_nx([CLAIM_PREFIX + k for k in kv_keys], replica.encode(), self.ttl_s)
        except TimeoutError:
            pass  # lost: the engine's events will tell the other routers soon enough

    def _prune(self, now: float) -> None:
        for key in [k for k, (_, t) in self._local.items() if t <= now]:
            del self._local[key]
        while len(self._local) >= MAX_LOCAL:  # still full: the oldest claims go first (insertion order)
            del self._local[next(iter(self._local))]
