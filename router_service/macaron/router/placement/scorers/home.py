"""Prefix home: the replica a prompt's first block hashes to, so routers agree on prompts nobody has seen.

A rendezvous hash of the first block (system prompt and the head of the conversation) over the
candidates gives every prompt head one "home" replica, the same on every router replica and
without any shared state. It matters when the prefix index knows nothing yet (several routers
routing the first turns of sessions that share a system prompt at the same moment): they all
send it home instead of spreading it by load, and load is then bounded by the balance guard
(consistent hashing with bounded load). Once blocks are recorded, the prefix scorer leads; and
once an engine's own KV-cache events say it holds part of the prompt, home stays silent (the
engines' truth decides, not a hash of the head).
"""

from __future__ import annotations

from typing import Sequence

from macaron.router.placement.pickers import rendezvous
from macaron.router.placement.types import PlacementRequest, Snapshot


class PrefixHomeScorer:
    """1.0 for the home replica of the prompt's first block, 0 for the others (all 0 without blocks)."""

    name = "prefix_home"
    category = "affinity"

    def score(self, request: PlacementRequest, replicas: Sequence[str], snapshot: Snapshot) -> dict[str, float]:
        if not request.block_hashes or not replicas:
            return {r: 0.0 for r in replicas}
        if any(snapshot.prefix_share.get(r, 0.0) > 0 for r in snapshot.precise if r in replicas):
            return {r: 0.0 for r in replicas}
        home = rendezvous(request.block_hashes[0], sorted(replicas))
        return {r: 1.0 if r == home else 0.0 for r in replicas}
