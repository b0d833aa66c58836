"""Prefix home: the replica a prompt's head hashes to, so routers agree on prompts nobody has seen.

A rendezvous hash of the prompt's head block (`PlacementRequest.tie_key`: the first block past the
specialist's own profile prompt, so an application's system prompt or the conversation; the first
block when that is unknown) over the candidates gives every prompt head one "home" replica, the
same on every router replica and without any shared state. It matters when the prefix index knows nothing yet (several routers
routing the first turns of sessions that share a system prompt at the same moment): they all
send it home instead of spreading it by load, and load is then bounded by the balance guard
(consistent hashing with bounded load). Once blocks are recorded, the prefix scorer leads; and
once an engine's own KV-cache events say it holds the prompt's head (`min_share` of it, the
head grouping's share), home stays silent (the engines' truth decides, not a hash of the head).
A shorter match does not silence it: every prompt of a specialist opens with the specialist's
profile prompt, so a block or two of it is cached wherever that specialist served before, and
that says nothing about where this prompt's head lives. (It did silence home, and the first
sessions of two applications, placed before anything of their heads was cached, met on the
replica that had served both specialists' profile prompts.) A turn of a session placed before is not a prompt
nobody has seen: its replica is known (`session_replica`), so home is silent for it. Otherwise, once the session's
replica had evicted part of its history (no engine holding `min_share` of the prompt), home (1.5) plus one request
in flight there outweighed the session's own weight (2) and moved the turn, history and all, to the head's home.
"""

from __future__ import annotations

from typing import Sequence

from macaron.router.placement.pickers import rendezvous
from macaron.router.placement.types import PlacementRequest, Snapshot


class PrefixHomeScorer:
    """1.0 for the home replica of the prompt's head block, 0 for the others (all 0 without blocks, and for a
    session's turn whose replica is among the candidates)."""

    name = "prefix_home"
    category = "affinity"

    def __init__(self, min_share: float = 0.5) -> None:
        self.min_share = min_share
        """An engine known to hold this share of the prompt silences home (RouterSettings.head_group.min_share)."""

    def score(self, request: PlacementRequest, replicas: Sequence[str], snapshot: Snapshot) -> dict[str, float]:
        if not request.block_hashes or not replicas or request.session_replica in replicas:
            return {r: 0.0 for r in replicas}
        if any(snapshot.prefix_share.get(r, 0.0) >= self.min_share for r in snapshot.precise if r in replicas):
            return {r: 0.0 for r in replicas}
        home = rendezvous(request.tie_key or request.block_hashes[0], sorted(replicas))
        return {r: 1.0 if r == home else 0.0 for r in replicas}
