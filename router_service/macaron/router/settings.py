"""Settings of the L0 router: where it listens, how it decides, how it places, how it forwards.

`MacaronSettings.router` holds one `RouterSettings`; every field is documented by its
description (docs/configuration.md is generated from them). Importing this module stays light
(pydantic only): the configuration imports it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from macaron.admission import AdmissionSettings
from macaron.auth.settings import ClientTlsSettings, ServerTlsSettings
from macaron.discovery import DiscoverySettings
from macaron.discovery_k8s import EndpointSliceSettings
from macaron.router.kv_index.settings import KVIndexSettings
from macaron.lifecycle.settings import LifecycleSettings
from macaron.ports import ROUTER_PORT

Policy = Literal["round_robin", "least_load", "prefix_affinity"]


class PoolTargets(BaseModel):
    """gRPC targets of each specialist pool; the router balances over a pool's targets itself."""

    model_config = ConfigDict(extra="forbid")

    chat: list[str] = Field(
        default_factory=list,
        description="Targets of the chat pool: `host:port` entries (one channel each) or one "
        "`dns:///name:port` (a headless Service, round-robin over its addresses); "
        "empty: 127.0.0.1 on specialists.chat.port.",
    )
    agent: list[str] = Field(default_factory=list, description="Targets of the agent pool (as for chat).")
    code: list[str] = Field(default_factory=list, description="Targets of the code pool (as for chat).")
    ui: list[str] = Field(default_factory=list, description="Targets of the ui pool (as for chat).")


class PlacementWeights(BaseModel):
    """Weights of the prefix_affinity policy's scorers (each scorer gives [0, 1] per replica)."""

    model_config = ConfigDict(extra="forbid")

    prefix: float = Field(
        3.0,
        description="Weight of the longest cached prefix (matched blocks / prompt blocks): from the engines' own "
        "KV-cache events where a replica publishes them, else from the approximate index of what was sent there.",
    )
    adapter: float = Field(
        0.5,
        description="Weight of adapter residency: 1 where the engine lists the request's adapter version as loaded, "
        "0.5 where it could not be read, 0 where it is not loaded (it would have to be loaded first).",
    )
    home: float = Field(
        1.5,
        description="Weight of the prompt head's home replica (a rendezvous hash of the first block): routers "
        "agree on prompts the index does not know yet; above the load weight, so load acts through the balance guard. "
        "Silent for a session's turn whose replica is known (the session scorer keeps it there).",
    )
    load: float = Field(1.0, description="Weight of in-flight load (1 for the least loaded, 0 for the most).")
    session: float = Field(
        2.0,
        description="Weight of the session's previous replica (1 for it, 0 for others); above the load weight, "
        "so a conversation stays with its cache unless the balance guard finds that replica overloaded.",
    )
    spread: float = Field(
        4.0,
        description="Weight of session spread with head grouping, for requests that start a session (or have none): "
        "replicas that hold the new session's head (router.head_group.min_share of its prompt) and have room for "
        "one more session score 0.75 to 1, the others 0; when no holder has room, 1 for the replica with the "
        "fewest live sessions (a turn in the last one to two router.spread_window_s), 0 for the most (and for full holders). Above "
        "prefix + home, so it decides where a new session goes. A continuing session's turns score 1 everywhere "
        "(session and prefix decide).",
    )


class HeadGroupSettings(BaseModel):
    """When a new session joins the replicas that already hold its prompt's head instead of being spread.

    Sessions behind one long head (an application's system prompt and tools) are cheapest where that head is
    resident: spreading them prefills the head once per replica. Piling them makes one cache hold every
    history, and it evicts them. The spread scorer groups a new session behind its head while the holder keeps
    room (the head once, every recent session's expected footprint, within its KV capacity) and is not
    `max_excess` sessions above the least used replica; otherwise it spreads."""

    model_config = ConfigDict(extra="forbid")

    min_share: float = Field(
        0.5,
        description="Share of a new session's prompt a replica must hold (engine truth where it publishes KV-cache "
        "events, else the approximate index) for it to count as holding the session's head; below this, the head "
        "is too short to be worth a pile and sessions are spread. 1.0 or more: never group (spread only).",
    )
    max_excess: int = Field(
        2,
        description="A head's holder takes a new session only while it has fewer than this many live sessions "
        "(router.spread_window_s) above the replica with the fewest: the session-count imbalance grouping may "
        "cause. 0: never group.",
    )
    session_growth: float = Field(
        4.0,
        description="Expected KV footprint of a session beyond its shared head, as a multiple of its first "
        "request's own tokens (prompt minus the head held there): a conversation's history grows turn by turn "
        "after it is placed. A holder has room when head + (its recent sessions + 1) x that footprint fits its "
        "KV capacity (`max_total_num_tokens` in its server info); replicas that report no capacity are judged "
        "on max_excess alone.",
    )

    pending_ttl_s: float = Field(
        20.0,
        description="Seconds a pending head claim lasts: when a router places a new session whose head no replica "
        "is known to hold, it claims the head's KV blocks for that replica in the placement store (first writer "
        "wins), and every router counts the claimed replica as holding the head until the engine's KV-cache "
        "events confirm it or the claim expires. Sessions that start together, before any prefill is reported, "
        "then meet on one replica instead of being spread blind. Longer than a head's prefill under load; 0: no "
        "claims.",
    )
    landing_s: float = Field(
        2.0,
        description="Seconds a replica stays taken by the first new head (a prompt head no replica holds or has "
        "claimed) of a session that a router sends there: another router that places a different new head at the "
        "same moment and "
        "scored that replica within router.weights.home of its best sends it to its next best instead. Two routers "
        "starting the first sessions of two applications at once see no session anywhere and send each head to its "
        "home; without this they meet where the homes coincide. It costs new heads one store round trip before "
        "they are forwarded. 0: off.",
    )
    pending_max_blocks: int = Field(
        128,
        description="Most leading KV blocks of a prompt one claim covers (one key per block in the placement "
        "store); 0: no claims.",
    )


class RouterSettings(BaseModel):
    """The L0 router: decision (explicit > session > classifier > judge > chat), placement, forwarding."""

    model_config = ConfigDict(extra="forbid")

    # --- server ---
    host: str = Field(
        "127.0.0.1",
        description="Address the router's gRPC server binds to; any non-loopback address requires auth.api_keys and "
        "auth.internal_token.",
    )
    tls: ServerTlsSettings = Field(
        default_factory=ServerTlsSettings, description="TLS of the router's gRPC server (off while cert_file is empty)."
    )
    specialist_tls: ClientTlsSettings = Field(
        default_factory=ClientTlsSettings, description="TLS of the router's calls to the specialists (set it when "
        "specialists.tls is on)."
    )
    port: int = Field(ROUTER_PORT, description="gRPC port; Prometheus metrics are served on port + 1000.")
    metrics: bool = Field(True, description="Serve Prometheus metrics on port + 1000.")
    grace_period_s: float = Field(10.0, description="On SIGTERM, seconds in-flight streams get to finish.")
    admission: AdmissionSettings = Field(
        default_factory=AdmissionSettings, description="Admission control: Generate calls in flight at once on this "
        "replica (the gateway's included); the excess gets RESOURCE_EXHAUSTED with RetryInfo at once, before auth or "
        "routing."
    )
    event_loop: Literal["auto", "uvloop", "asyncio"] = Field(
        "auto",
        description="The `macaron router` process's event loop: uvloop (libuv; each store round trip and stream "
        "chunk costs the loop less, which is most of what the router adds to a request), asyncio, or auto "
        "(uvloop where it is installed, else asyncio).",
    )
    router_id: str | None = Field(
        None, description="This replica's name in shared load counters; empty: host name, pid and a random suffix."
    )
    # --- deciding the specialist ---
    session_ttl_s: float = Field(
        1800.0, description="Seconds a session's specialist and replica are kept after its last request (sliding)."
    )
    switch_threshold: float = Field(
        0.8,
        description="A session leaves its specialist only when the classifier gives another specialist at "
        "least this probability (hysteresis); never while a tool loop is open.",
    )
    switch_min_words: int = Field(
        3,
        description="A new turn with fewer words never switches a session's specialist (continuations such as "
        "'ok', 'and then?' or 'continue' carry no domain, whatever the classifier says of them).",
    )
    switch_margin: float = Field(
        0.1,
        description="With the classifier's learned conversation decision, a session switches only when the chosen "
        "specialist's probability beats the session's own by at least this much: a near tie (short follow-ups such "
        "as 'tell me more' carry little domain) stays. 0 follows the decision's top choice exactly.",
    )
    judge_threshold: float = Field(
        0.0,
        description="Below this classifier confidence, the L0 chat adapter judges on the engine (0: never judge). "
        "Off by default: on the cases it would judge (confidence < 0.5, unseen sources and conversations), "
        "SmolLM2's chat adapter chose right 24 % of the time against the classifier's 52 % "
        "(loadtest/bench_judge.py); turn it on for a base model that measures better there.",
    )
    judge_timeout_s: float = Field(
        0.5, description="Longest the judge's engine call may take (less when the request has less time left before its "
        "deadline); on timeout or error the request goes to chat."
    )
    judge_max_chars: int = Field(
        1500, description="The judge sees at most this many characters of the newest user turn (its tail is cut)."
    )
    judge_history_turns: int = Field(
        2, ge=0, le=8,
        description="Earlier user turns the judge sees before the newest one (each cut to a fifth of judge_max_chars), "
        "so that a follow-up is judged in its conversation; 0 shows the newest turn alone.",
    )
    # --- placing it on a replica ---
    policy: Policy = Field(
        "prefix_affinity",
        description="Replica choice: round_robin, least_load (in-flight requests shared in Redis), or "
        "prefix_affinity (weighted prefix, load and session scorers with a balance guard).",
    )
    weights: PlacementWeights = Field(default_factory=PlacementWeights, description="Scorer weights of prefix_affinity.")
    prefix_block_chars: int = Field(
        256, description="Characters per block of the rendered prompt; each block's hash chains all before it."
    )
    prefix_max_blocks: int = Field(128, description="Most blocks of a prompt hashed and looked up (its head).")
    prefix_ttl_s: float = Field(
        600.0,
        description="Approximate index (replicas without KV-cache events): seconds a block is remembered on the "
        "replica it was sent to; a restart of that replica (a new start time in its server info) and a response "
        "reporting fewer cached tokens than predicted forget it sooner.",
    )
    kv_events: KVIndexSettings = Field(
        default_factory=KVIndexSettings,
        description="The KV-cache index: the engines' own events of what their prefix caches hold, shared in the "
        "placement store.",
    )
    head_group: HeadGroupSettings = Field(
        default_factory=HeadGroupSettings,
        description="The spread scorer's grouping: a new session goes where its prompt's head is already "
        "resident while that replica has room, and is spread only otherwise.",
    )
    spread_window_s: float = Field(
        60.0,
        description="Session spread counts the sessions live on each replica: those with a turn there in this "
        "window or the one before (60 to 120 s back), each once per window however many turns it sends. Every turn "
        "renews its session, so a long conversation keeps counting while it talks, and one that ended (the API has "
        "no end signal) drops out one to two windows after its last turn.",
    )
    balance_abs_threshold: int = Field(
        8,
        description="Balance guard: the cache-best replica is overloaded when it has this many more in-flight "
        "requests than the least loaded one ...",
    )
    balance_rel_threshold: float = Field(
        1.5, description="... and more than this factor times its load; then the least loaded one is taken."
    )
    load_heartbeat_s: float = Field(2.0, description="How often this router republishes its in-flight counts.")
    load_stale_s: float = Field(10.0, description="In-flight counts of a router silent this long are ignored.")
    counts_refresh_s: float = Field(
        0.025,
        description="Placement reads every router's load and the session spread from rows kept in process: a request "
        "places on them and, when they are older than this, starts one background read for the requests after it "
        "(routers publish their load at most every 20 ms, so a read per request would be no fresher, and would put a "
        "store round trip before every first token) ...",
    )
    counts_idle_refresh_s: float = Field(
        0.25,
        description="... between requests, rows older than this are read again in the background, so the first request "
        "after a pause does not wait for the store either (0: no renewal between requests) ...",
    )
    counts_max_age_s: float = Field(
        1.0,
        description="... and rows older than this (the store did not answer) are read inline, in the request's path. "
        "0: every request reads them itself.",
    )
    store_retry_s: float = Field(
        1.0, description="While Redis is unreachable, it is skipped and probed again after this many seconds."
    )
    discovery: DiscoverySettings | None = Field(
        None, description="How the router finds base-group replicas; empty: the same as specialists.discovery."
    )
    kubernetes: EndpointSliceSettings = Field(
        default_factory=EndpointSliceSettings,
        description="Discovery through the Kubernetes API (EndpointSlices of a Service); overrides `discovery` when enabled.",
    )
    # --- forwarding ---
    pools: PoolTargets = Field(default_factory=PoolTargets, description="Where each specialist pool listens.")
    max_attempts: int = Field(
        3, description="Attempts on distinct pool replicas, only before the first chunk (UNAVAILABLE, RESOURCE_EXHAUSTED)."
    )
    default_timeout_s: float = Field(600.0, description="Deadline of a forwarded call when the caller set none.")
    # --- adapter versions ---
    lifecycle: LifecycleSettings = Field(
        default_factory=LifecycleSettings,
        description="Adapter versions: admin service keys, load checks, unload draining, promotion gate, auto-rollback.",
    )
