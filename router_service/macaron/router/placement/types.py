"""Placement's vocabulary: the request as placement sees it, the snapshot, and the plugin Protocols.

As in llm-d's scheduler, a profile runs filters, then weighted scorers (each gives [0, 1] per
replica), then one picker. Plugins are pure functions of (request, replicas, snapshot): the
snapshot is filled by one store read before they run (`snapshot.py`), so none of them does I/O
and each is tested with plain values. Replicas are normalized base-group URLs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Mapping, Protocol, Sequence

Category = Literal["affinity", "distribution", "balance"]


class NoReplicaError(RuntimeError):
    """No replica is left to place the request on (none discovered, or all filtered out)."""


@dataclass(frozen=True, slots=True)
class PlacementRequest:
    """What placement knows of a request."""

    specialist: str
    block_hashes: tuple[str, ...] = ()
    """The rendered prompt's chained block hashes (prefix_index.block_hashes); empty when not rendered."""
    session_replica: str | None = None
    """The replica the session's previous turn went to."""
    tie_key: str = ""
    """Stable text that breaks ties the same way on every router replica, and keys the prompt's home: the hash of
    the prompt's head block (`prefix_index.head_block`) when rendered, else the session, else the request."""
    kv_keys: tuple[str, ...] = ()
    """The prompt's token-block keys in the KV-cache index (kv_index.keys); empty when not computed."""
    prompt_tokens: int = 0
    prompt_chars: int = 0
    block_tokens: int = 0
    """Tokens per KV-cache block (what one matched kv key is worth)."""
    block_chars: int = 0
    """Characters per block of the approximate index."""
    adapter: str = ""
    """The adapter version's name on the engines (`code@v3`)."""
    prompt_ids: Sequence[int] = ()
    """The rendered prompt's token ids (empty when not tokenized): handed on to the specialist."""
    fresh_counts: bool = False
    """The request starts (or moves) a session: its placement is the one that spreads sessions, so it reads every
    router's counts from the store rather than the rows kept in process (which may miss another router's sessions
    of the last tens of milliseconds). Turns that continue a session and requests without one use the kept rows."""
    approximate: bool = True
    """Whether the approximate index's blocks are read from (and written to) the store. False when every replica
    publishes KV-cache events: engine truth covers them all, so those reads and writes would only cost a round
    trip's payload and store work. The block hashes are still kept in process (ties, a store outage)."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Shared state read once per request: load, cached prefixes, failing replicas."""

    load: Mapping[str, int] = field(default_factory=dict)
    """In-flight requests per replica, summed over every live router replica."""
    prefix: Mapping[str, int] = field(default_factory=dict)
    """Blocks of this request's prompt each replica served recently (longest match)."""
    total_blocks: int = 0
    down: frozenset[str] = frozenset()
    """Replicas this router saw fail recently."""
    degraded: bool = False
    """The shared store did not answer: load is this router's own, prefix is what this process knows (its own
    copy of the engines' events, its own recent placements)."""
    blocks_seen: tuple[Mapping[str, bytes], ...] = ()
    """The store's raw entries of the request's blocks (lets the index skip fresh writes)."""
    precise: frozenset[str] = frozenset()
    """Replicas whose prefix comes from their own KV-cache events (the others': the approximate index)."""
    prefix_share: Mapping[str, float] = field(default_factory=dict)
    """Share of the prompt each replica holds: kv blocks matched / prompt kv blocks (precise replicas), or
    approximate blocks matched / prompt blocks (the others)."""
    predicted_tokens: Mapping[str, int] = field(default_factory=dict)
    """Prompt tokens the index expects each replica to serve from its cache."""
    approx_age_ms: Mapping[str, int] = field(default_factory=dict)
    """Approximate index: age of the deepest block matched on each replica (for the capacity model's feedback)."""
    adapter_loaded: Mapping[str, bool | None] = field(default_factory=dict)
    """Whether each replica's engine lists the request's adapter version (None: could not be read)."""
    sessions: Mapping[str, int] = field(default_factory=dict)
    """Sessions placed on each replica in the recent window, by every router replica (the spread scorer's)."""
    capacity: Mapping[str, int] = field(default_factory=dict)
    """KV-cache tokens each replica holds at most (`max_total_num_tokens` of its server info); absent: unknown."""
    claimed: Mapping[str, int] = field(default_factory=dict)
    """Pending head claims (kv_index.pending): the replica a router just sent this prompt's head to, and how many
    of its leading KV blocks it holds by its claims (its deepest claim), before the engine's events report them."""
    counted_at: float = 0.0
    """When `sessions` were counted (monotonic; 0: unknown): sessions this router placed since then are not in
    them (`SnapshotReader.caught_up` adds them)."""
    own_load: Mapping[str, int] = field(default_factory=dict)
    """This router's own in-flight requests per replica when `load` was merged (part of `load`), so that
    `SnapshotReader.caught_up` can replace it with the requests in flight now."""


class Filter(Protocol):
    name: str

    def filter(self, request: PlacementRequest, replicas: Sequence[str], snapshot: Snapshot) -> list[str]: ...


class Scorer(Protocol):
    name: str
    category: Category

    def score(self, request: PlacementRequest, replicas: Sequence[str], snapshot: Snapshot) -> dict[str, float]:
        """A score in [0, 1] per replica (higher is better)."""
        ...


class Picker(Protocol):
    name: str

    def pick(self, request: PlacementRequest, scored: Mapping[str, float], snapshot: Snapshot) -> str: ...
