"""The router's core, without gRPC: decide the specialist, place the request, keep shared state.

`RoutingCore.route(request)` runs, for one validated request:

1. the session read (with the version states: one store round trip; skipped without a session id),
2. the fast classifier (skipped when forced, or inside a tool loop of a live session),
3. the decision pipeline of `decision.py`, and the judge when the classifier is unsure,
4. placement: the prompt rendered by the specialist's own profile and the shared renderer,
   hashed into character blocks (the approximate index) and tokenized into token blocks (the
   KV-cache index the engines' own events fill, kv_index/); one placement-store read (load,
   both indexes) fills the snapshot, with each replica's adapter residency; the policy's profile
   picks the replica. While every replica publishes KV-cache events, the approximate index's blocks
   stay out of that read and out of the store (engine truth covers them all); it is kept in process only,
   for ties and a store outage,
4b. the adapter version (macaron.lifecycle): the four version states are held in memory, pushed
   by the lifecycle writer (`router.lifecycle.state_push`), or else come in the session read's
   own store round trip (no extra one); a session keeps its version, a new one may draw the
   canary; placement only sees replicas whose engine lists that version,
5. after the pick: the replica's in-flight count goes up until `Route.release()` and the prefix
   blocks enter this router's overlay; once the first token went out (`Route.commit()`), the
   session and the blocks are written to the store in the background, off the path to that
   token, and only for requests that were actually served.

Every store call goes through a `GatedStore`, so a dead Redis costs nothing per request: the
route is then decided by the classifier alone, without session or affinity. Sessions and version
states live on the state store, placement state on its own (evictable) one (`cache_store`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping, Protocol, Sequence

from macaron.discovery import DiscoveryError, ReplicaSource, normalize_url
from macaron.lifecycle.assign import VersionChoice
from macaron.lifecycle.runtime import VersionRuntime
from macaron.lifecycle.versions import SpecialistState
from macaron.ports import SPECIALISTS
from macaron.prompting import ChatRequest, render, render_key
from macaron.router.classifier.errors import ClassificationInputError
from macaron.router.decision import (
    Classified,
    Decision,
    DecisionPolicy,
    SessionView,
    Unsure,
    after_judge,
    decide,
    newest_user_words,
    tool_loop_open,
)
from macaron.kv_events.wire import lora_id_for
from macaron.router.judge import Judge
from macaron.router.kv_index.index import KVIndexWriter
from macaron.router.placement.shared_counts import SharedCounts
from macaron.router.kv_index.keys import block_keys_of_tokens
from macaron.router.kv_index.pending import PendingClaims, holds_head, with_claims
from macaron.router.kv_index.subscriber import KVEventFollower
from macaron.router.metrics import RouterMetrics
from macaron.router.placement import Placement, PlacementProfile, PlacementRequest, Snapshot, build_profile
from macaron.router.placement.snapshot import LoadTracker, SnapshotReader
from macaron.router.prefix_index import PrefixIndex, adapter_seed, block_hashes, head_block
from macaron.router.session_end import SessionEndFollower, announce_end
from macaron.router.sessions import SessionStore, session_key
from macaron.router.sessions import decode as decode_session
from macaron.router.settings import RouterSettings
from macaron.router.store_gate import GatedStore
from macaron.store import Admission, AdmitResult, StoreUnavailableError

log = logging.getLogger(__name__)
MAX_BACKGROUND_WRITES = 1024
SESSION_SETTLE_S = 0.25
"""How long a stream's last chunk waits for its turn's session write (a store round trip, normally
well under a millisecond by then): enough for read-your-writes, never long enough to hold an answer."""
SEND_TURNS = 3
"""Loop turns a route yields before its synchronous work, so the store reads it started are sent first."""


def _consume(task: asyncio.Task[Any]) -> None:
    """A read-ahead nobody awaits (a wrong guess) must not log 'exception never retrieved'."""
    if not task.cancelled():
        task.exception()


class ClassifierLike(Protocol):
    """The fast classifier (macaron.router.classifier), or any object with the same call."""

    def classify(self, text: str | None = None, *, messages: Any = None, tools: Any = None) -> Any: ...


class PromptProfileLike(Protocol):
    system_prompt: str
    tool_call_prefix: str


@dataclass(frozen=True, slots=True)
class AdapterRef:
    """The adapter a specialist serves with (its prefix-hash seed)."""

    name: str
    version: str = ""

    @property
    def seed(self) -> str:
        return adapter_seed(self.name, self.version)


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """One validated request, as the core sees it."""

    chat: ChatRequest
    owner: str = "dev"
    """Who calls (the API key's owner): namespaces sessions."""
    session_id: str = ""
    forced: str | None = None
    replica_hint: str | None = None
    """A caller's replica choice; obeyed when it is a discovered replica (InvalidHintError otherwise)."""
    request_id: str = ""
    deadline: float | None = None
    """When the caller stops waiting (time.monotonic()); None: no deadline. Bounds the judge's engine call."""

    def remaining_s(self) -> float | None:
        """Seconds left before the deadline (negative once past), None without one."""
        return None if self.deadline is None else self.deadline - time.monotonic()


@dataclass(slots=True)
class StepTimes:
    """Where a route's milliseconds went: the wait each step put on the request's path (steps that run side by
    side overlap, so they need not add up to `Route.route_ms`). Filled by `RoutingCore.route`; `admit_ms` and
    `upstream_ttft_ms` by the servicer around it."""

    admit_ms: float = 0.0
    state_read_ms: float = 0.0
    classify_ms: float = 0.0
    judge_ms: float = 0.0
    placement_ms: float = 0.0
    upstream_ttft_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class AdmitOnRead:
    """The caller's limits, checked and taken in the route's session-and-states read: one state-store round
    trip for both. `answer` always gets the store's verdict, or its error (the guard then counts per process);
    the read is never cancelled once sent, so a slot the store took is always handed to a lease."""

    admission: Admission
    answer: "asyncio.Future[AdmitResult]"


async def _passed(gate: Awaitable[Any]) -> None:
    """Waits for the caller's limits; a cancelled request does not cancel them (the lease they may hold must
    reach the caller, which releases it)."""
    await asyncio.shield(gate)


class InvalidHintError(ValueError):
    """The caller's replica hint is not a discovered base-group replica."""


@dataclass
class Route:
    """A routed request: the decision, the replica, and what it cost."""

    decision: Decision
    replica: str | None = None
    placement: Placement | None = None
    snapshot: Snapshot | None = None
    session: SessionView | None = None
    decision_ms: float = 0.0
    route_ms: float = 0.0
    degraded: bool = False
    adapter: str = ""
    version: str = ""
    """The adapter version that serves the request ("" is the unversioned adapter)."""
    version_reason: str = "stable"
    canary: bool = False
    predicted_cached_tokens: int = 0
    """Prompt tokens the index expected the chosen replica to serve from its cache."""
    index_source: str = "none"
    """Where that prediction came from: engine (KV-cache events), approximate, or none."""
    approx_age_ms: int = 0
    """Approximate index: age of the deepest block it matched on the chosen replica."""
    prompt_ids: Sequence[int] = ()
    """The prompt's token ids as placement rendered them for the chosen specialist (empty: not rendered here)."""
    render_key: str = ""
    """What they were rendered with (`macaron.prompting.render_key`); the specialist uses them if it matches."""
    times: StepTimes = field(default_factory=StepTimes)
    _release: Any = field(default=None, repr=False)
    _commit: Any = field(default=None, repr=False)
    _session_write: "asyncio.Task[Any] | None" = field(default=None, repr=False)

    def commit(self, served: str | None = None) -> None:
        """The first token went out: write the session and the served prefix to the store, in the
        background (kept off the path to that token). `served` is the replica the specialist
        reports, when it had to use another one than the hint."""
        if self._commit is not None:
            self._session_write = self._commit(served or self.replica)
            self._commit = None

    async def settled(self, timeout_s: float = SESSION_SETTLE_S) -> None:
        """Before the last chunk goes out: waits (briefly) for this turn's session write, so a client
        that sends its next turn as soon as this one ends reads the session it just made (read your
        own writes). A slow or failed store write does not hold the answer past `timeout_s`."""
        task, self._session_write = self._session_write, None
        if task is not None and not task.done():
            await asyncio.wait([task], timeout=timeout_s)

    def release(self) -> None:
        """The forwarded stream ended: this router's in-flight count on the replica goes down."""
        if self._release is not None:
            self._release()
            self._release = None


def classified_from(result: Any) -> Classified:
    """The classifier's answer (an object or mapping with specialist, probabilities, confidence)."""
    get = result.get if isinstance(result, Mapping) else lambda k, d=None: getattr(result, k, d)
    probs = get("probabilities", None)
    if probs is not None and not isinstance(probs, Mapping):
        probs = dict(zip(SPECIALISTS, (float(p) for p in probs)))
    probs = {str(k): float(v) for k, v in (probs or {}).items()}
    specialist = str(get("specialist", "") or (max(probs, key=probs.get) if probs else ""))
    confidence = get("confidence", None)
    confidence = float(confidence if confidence is not None else probs.get(specialist, 0.0))
    refinable = get("refinable", None)
    return Classified(specialist, probs, confidence, float(get("latency_ms", 0.0) or 0.0),
                      bool(get("session_aware", False)), None if refinable is None else bool(refinable))


def _classified_or_none(classify: Callable[[], Any]) -> Classified | None:
    """Runs one classifier call; None when there is nothing to classify or the classifier failed (the
    judge or the session decides then: a classifier bug must not fail the request)."""
    try:
        return classified_from(classify())
    except ClassificationInputError as exc:  # e.g. no user turn
        log.debug("not classifiable: %s", exc)
        return None
    except Exception:  # noqa: BLE001
        log.exception("classifier failed; deciding without it")
        return None


class RoutingCore:
    """Decision + placement + shared state for one router replica."""

    def __init__(
        self,
        settings: RouterSettings,
        *,
        store: GatedStore,
        cache_store: GatedStore | None = None,
        profiles: Mapping[str, PromptProfileLike],
        adapters: Mapping[str, AdapterRef],
        tokenizer: Any,
        discovery: ReplicaSource | None,
        classifier: ClassifierLike | None,
        judge: Judge | None,
        router_id: str,
        metrics: RouterMetrics | None = None,
        policy: str | None = None,
        versions: VersionRuntime | None = None,
        engine_api_key: str | None = None,
        server_info: Callable[[str], Awaitable[dict[str, Any]]] | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.cache_store = cache_store if cache_store is not None else store
        """Placement state (index, affinity, load): evictable, apart from sessions and limits when configured so."""
        self.profiles = profiles
        self.adapters = adapters
        self.tokenizer = tokenizer
        self.render_keys: dict[str, str] = {
            name: key for name, profile in profiles.items()
            if tokenizer is not None and (key := render_key(profile, tokenizer)) is not None}
        """Per specialist, what its prompts are rendered with here: the ids placement made go with this key."""
        self.discovery = discovery
        self.classifier = classifier
        self.judge = judge
        self.router_id = router_id
        self.metrics = metrics or RouterMetrics()
        self.policy = policy or settings.policy
        self.decision_policy = DecisionPolicy(settings.switch_threshold, settings.judge_threshold,
                                              settings.switch_min_words, settings.switch_margin)
        self.sessions = SessionStore(store, settings.session_ttl_s)
        self.prefix_index = PrefixIndex(self.cache_store, settings.prefix_ttl_s)
        self.tracker = LoadTracker(self.cache_store, router_id, heartbeat_s=settings.load_heartbeat_s,
                                   stale_s=settings.load_stale_s)
        head = settings.head_group
        self.pending: PendingClaims | None = None
        """Head claims (prefix_affinity with the KV-cache index): sessions that start together meet on one replica."""
        if settings.kv_events.enabled and discovery is not None and self.policy == "prefix_affinity":
            self.pending = PendingClaims(self.cache_store, ttl_s=head.pending_ttl_s, max_blocks=head.pending_max_blocks,
                                         landing_s=head.landing_s)
        self.profile: PlacementProfile = build_profile(self.policy, settings)
        self.versions = versions or VersionRuntime(
            settings.lifecycle, store,
            {n: SpecialistState.initial(n, a.name, a.version) for n, a in adapters.items()},
            self.replicas, router_id, engine_api_key=engine_api_key,
        )
        kv = settings.kv_events
        self.kv_writer = KVIndexWriter(self.cache_store, block_size=kv.block_size, entry_ttl_s=kv.entry_ttl_s)
        self.snapshots = SnapshotReader(self.cache_store, self.tracker, prefix_ttl_s=settings.prefix_ttl_s,
                                        index=self.prefix_index, spread_window_s=settings.spread_window_s,
                                        pending=self.pending, local_depths=self.kv_writer.depths,
                                        head_min_share=head.min_share,
                                        counts=SharedCounts(self.cache_store, refresh_s=settings.counts_refresh_s,
                                                            max_age_s=settings.counts_max_age_s,
                                                            idle_refresh_s=settings.counts_idle_refresh_s))
        self.kv_follower: KVEventFollower | None = None
        if kv.enabled and discovery is not None and self.policy == "prefix_affinity":
            self.kv_follower = KVEventFollower(kv, self.kv_writer, self.replicas, server_info or self._server_info,
                                               on_plain=self._plain_replica,
                                               on_restart=lambda _: self.versions.inventory.hurry())
        self._background: set[asyncio.Task[Any]] = set()
        self._canaries: dict[str, str] = {}
        self.session_ends: SessionEndFollower | None = None
        """Sessions other routers end are counted out here too (spread counts matter to prefix_affinity only)."""
        if self.policy == "prefix_affinity":
            self.session_ends = SessionEndFollower(self.cache_store, self._count_out)

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self.tracker.start()
        await self.versions.start()
        if self.session_ends is not None:
            await self.session_ends.start()
        if self.kv_follower is not None:
            self.kv_follower.start()

    async def _server_info(self, replica: str) -> dict[str, Any]:
        info = await self.versions.engines.get(replica).server_info(timeout=self.settings.kv_events.timeout_s)
        return info.model_dump()

    def _plain_replica(self, replica: str, started_at: float | None) -> None:
        """A replica without KV-cache events: the approximate index forgets what was sent before it started."""
        if started_at is not None:
            started_ms = int(started_at * 1000)
            if self.snapshots.started_ms.get(replica, started_ms) != started_ms:  # it restarted: adapters may be gone
                self.versions.inventory.hurry()
            self.snapshots.started_ms[replica] = started_ms

    async def aclose(self) -> None:
        if self.kv_follower is not None:
            await self.kv_follower.aclose()
        if self.session_ends is not None:
            await self.session_ends.stop()
        if self._background:
            await asyncio.wait(self._background, timeout=2.0)
        if self.snapshots.counts is not None:
            await self.snapshots.counts.aclose()
        await self.tracker.stop()
        await self.versions.aclose()
        if self.judge is not None:
            await self.judge.aclose()
        if self.discovery is not None:
            await self.discovery.close()

    @property
    def degraded(self) -> bool:
        return self.store.degraded

    # ------------------------------------------------------------ deciding

    async def classify(self, chat: ChatRequest, session: str | None = None, *,
                       gate: Awaitable[Any] | None = None) -> Classified | None:
        """The classifier's answer on the conversation; None when there is none or it fails.

        The fast path runs inline (well under a millisecond); when its answer could change with the
        classifier's embedding model (tens of milliseconds of CPU: an unsure request escalates, an unsure
        conversation turn's follow-up model reads the turn's embedding), that call runs in a worker
        thread, so the event loop keeps serving other requests and their store calls meanwhile.
        `gate` (the caller's limit check) is awaited before escalating: an over-limit caller costs at most
        the fast path.
        """
        c = self.classifier
        if c is None:
            return None
        messages = [
            {"role": m.role, "content": m.content,
             **({"tool_calls": [{"id": t.id, "type": "function", "function": {"name": t.name, "arguments": t.arguments}}
                                for t in m.tool_calls]} if m.tool_calls else {})}
            for m in chat.messages
        ]
        tools = [t.openai_dict() for t in chat.tools] or None
        # A classifier that weighs the session itself gets it (one learned decision, no router threshold).
        extra: dict[str, Any] = {"session": session} if session and getattr(c, "accepts_session", False) else {}
        escalating = getattr(c, "escalation_enabled", False)
        first = _classified_or_none(lambda: c.classify(messages=messages, tools=tools, escalate=False, **extra)
                                    if escalating else c.classify(messages=messages, tools=tools, **extra))
        if not escalating or first is None:
            return first
        # Asked again with the encoder only where that could change the answer (`refinable`: unsure enough to
        # escalate, or a conversation turn whose follow-up model reads the turn's embedding); a classifier that
        # does not say is asked again below its threshold.
        refinable = first.refinable if first.refinable is not None else first.confidence < getattr(c, "threshold", 0.0)
        if not refinable:
            return first
        if gate is not None:  # its error (over the limit) is the caller's, not a classifier failure
            await _passed(gate)
        return await asyncio.to_thread(_classified_or_none, lambda: c.classify(messages=messages, tools=tools, **extra))

    async def read_session(self, owner: str, session_id: str) -> SessionView | None:
        if not session_id:
            return None
        try:
            return await self.sessions.get(owner, session_id)
        except StoreUnavailableError:
            return None

    async def replicas(self) -> tuple[str, ...]:
        if self.discovery is None:
            return ()
        try:
            return await self.discovery.replicas()
        except DiscoveryError as exc:
            log.warning("no base-group replica discovered (%s): forwarding without a replica hint", exc)
            return ()

    async def read_session_and_states(self, req: RouteRequest, admit: AdmitOnRead | None = None
                                      ) -> tuple[SessionView | None, dict[str, SpecialistState]]:
        """The session (when there is one) and every specialist's version state, in one store round trip. A forced
        request reads its session too: the decision does not need it, but placement does (the session's replica
        holds its history), and it rides on the states read at no extra round trip. `admit`: the caller's limits
        ride on it too (their verdict goes to `admit.answer`)."""
        if admit is not None:
            return await self._read_and_admit(req, admit)
        pushed = self.versions.pushed
        if not req.session_id and pushed:
            return None, self._pushed_states()
        keys = [session_key(req.owner, req.session_id)] if req.session_id else []
        try:
            raws = await self.store.hgetall_many(keys if pushed else [*keys, *self.versions.state_keys()])
        except StoreUnavailableError:
            self.metrics.state_reads.labels("last_known").inc()
            return None, self.versions.last_states
        return await self._decoded(req, raws, pushed)

    def _pushed_states(self) -> dict[str, SpecialistState]:
        self.metrics.state_reads.labels("push").inc()
        return self.versions.last_states

    async def _decoded(self, req: RouteRequest, raws: Sequence[Mapping[str, bytes]], pushed: bool
                       ) -> tuple[SessionView | None, dict[str, SpecialistState]]:
        """The session (first, when asked for) and the states (after it, unless they are pushed)."""
        session = decode_session(raws[0]) if req.session_id else None
        if pushed:
            return session, self._pushed_states()
        self.metrics.state_reads.labels("store").inc()
        return session, await self.versions.accept(raws[1:] if req.session_id else raws)

    async def _read_and_admit(self, req: RouteRequest, admit: AdmitOnRead
                              ) -> tuple[SessionView | None, dict[str, SpecialistState]]:
        answer = admit.answer
        pushed = self.versions.pushed
        keys = ([session_key(req.owner, req.session_id)] if req.session_id else []) + (
            [] if pushed else self.versions.state_keys())
        try:
            raws, verdict = await self.store.hgetall_many_and_admit(keys, admit.admission)
        except StoreUnavailableError as exc:
            if not answer.done():
                answer.set_exception(exc)
            self.metrics.state_reads.labels("last_known").inc()
            return None, self.versions.last_states
        except BaseException:
            if not answer.done():
                answer.cancel()
            raise
        if not answer.done():
            answer.set_result(verdict)
        return await self._decoded(req, raws, pushed)

    async def decide(self, req: RouteRequest, *, prefetched: tuple[SessionView | None] | None = None,
                     times: StepTimes | None = None, gate: Awaitable[Any] | None = None
                     ) -> tuple[Decision, SessionView | None]:
        """Steps 1-4: the specialist, and the session it was read from (`prefetched`: already read);
        `times` gets the classifier's and the judge's milliseconds; `gate` (the caller's limit check) is
        awaited before the judge is asked, so an over-limit caller costs no engine call."""
        if prefetched is not None:
            (session,) = prefetched
        else:
            session = None if req.forced else await self.read_session(req.owner, req.session_id)
        tool_loop = tool_loop_open(req.chat.messages)
        classified = None
        t0 = time.perf_counter()
        if not req.forced and not (session is not None and tool_loop):
            classified = await self.classify(req.chat, session.specialist if session is not None else None, gate=gate)
        t1 = time.perf_counter()
        outcome = decide(forced=req.forced, session=session, classified=classified, tool_loop=tool_loop,
                         policy=self.decision_policy, new_turn_words=newest_user_words(req.chat.messages))
        if isinstance(outcome, Unsure):
            if gate is not None:
                await _passed(gate)
            outcome = await self._judge(req, outcome)
            if times is not None:
                times.judge_ms += (time.perf_counter() - t1) * 1000
        if times is not None:
            times.classify_ms += (t1 - t0) * 1000
        self.metrics.decisions.labels(outcome.reason, outcome.specialist).inc()
        self.metrics.confidence.labels(outcome.reason).observe(outcome.confidence)
        return outcome, session

    async def _judge(self, req: RouteRequest, unsure: Unsure) -> Decision:
        if self.judge is None or self.settings.judge_threshold <= 0:
            return after_judge(unsure, None, "is off")
        chat_state = self.versions.last_states.get("chat")
        if chat_state is not None:  # the judge is the chat adapter's stable version, whatever was promoted
            self.judge.lora_path = chat_state.engine_name(chat_state.stable)
        answer, why = await self.judge.ask(req.chat, await self.replicas(), remaining_s=req.remaining_s())
        self.metrics.judge.labels("ok" if answer else ("timeout" if why.startswith("timed out") else "error")).inc()
        return after_judge(unsure, answer, why)

    # ------------------------------------------------------------ placing

    def prompt_text(self, chat: ChatRequest, specialist: str) -> str | None:
        """The prompt the specialist will send (None if it cannot be rendered)."""
        profile = self.profiles.get(specialist)
        if profile is None or self.tokenizer is None:
            return None
        try:
            return render(chat, profile, self.tokenizer)
        except Exception as exc:  # noqa: BLE001 - the specialist will report a bad request itself
            log.debug("cannot render the prompt for affinity: %s", exc)
            return None

    def engine_adapter(self, specialist: str, version: str | None = None) -> str:
        """The adapter's name on the engines (`code@v3`): the approximate index's seed, the KV index's lora_id."""
        ref = self.adapters[specialist]
        return ref.seed if version is None else adapter_seed(ref.name, version)

    def prompt_blocks(self, chat: ChatRequest, specialist: str, version: str | None = None) -> tuple[str, ...]:
        """The chained block hashes of the prompt the specialist will send (empty if it cannot render)."""
        text = self.prompt_text(chat, specialist)
        if text is None:
            return ()
        s = self.settings
        return tuple(block_hashes(text, block_chars=s.prefix_block_chars, seed=self.engine_adapter(specialist, version),
                                  max_blocks=s.prefix_max_blocks))

    def prompt_tokens(self, text: str) -> list[int]:
        """The prompt's token ids as the specialist sends them (no special tokens added)."""
        try:
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        except Exception as exc:  # noqa: BLE001 - a tokenizer that cannot: no KV-index lookup
            log.debug("cannot tokenize the prompt for the KV index: %s", exc)
            return []

    # ------------------------------------------------------------ reading ahead

    def _guess(self, req: RouteRequest, specialist: str | None = None) -> tuple[str, str] | None:
        """The (specialist, adapter version) of a request whose specialist is known before any store read
        (forced, or decided without a session); the version as the last known states choose it. None: no
        guess. A session's next turn is not guessed: on conversations that change topic, wrong guesses
        (a second read, the prompt hashed twice) cost more than the right ones saved."""
        if req.replica_hint or self.policy != "prefix_affinity":
            return None
        specialist = specialist or req.forced
        state = self.versions.last_states.get(specialist) if specialist else None
        if state is None or specialist not in self.adapters:
            return None
        key = f"{req.owner}\x00{req.session_id}" if req.session_id else (req.request_id or str(id(req)))
        return specialist, self.versions.choose(state, None, key).version

    def _read_ahead(self, req: RouteRequest, guess: tuple[str, str]
                    ) -> tuple[PlacementRequest, asyncio.Future[Snapshot]]:
        """Starts the placement read for the guess, so it overlaps the session read and the decision
        (one store round trip of latency instead of two); `route` uses it only if the guess was right."""
        preq = self.placement_request(req, guess[0], guess[1])
        now = self.snapshots.read_at_once(preq, with_load=True)
        if now is not None:  # nothing to wait for: no task, no turn of the event loop
            done: asyncio.Future[Snapshot] = asyncio.get_running_loop().create_future()
            done.set_result(now)
            return preq, done
        task = asyncio.ensure_future(self.snapshots.read(preq, with_load=True))
        task.add_done_callback(_consume)
        return preq, task

    # ------------------------------------------------------------ placing

    def placement_request(self, req: RouteRequest, specialist: str, version: str | None = None) -> PlacementRequest:
        """The prompt as the specialist will send it, in the blocks both indexes key (render, tokenize, hash);
        without the session's replica, which the caller adds."""
        s = self.settings
        hashes: tuple[str, ...] = ()
        kv_keys: tuple[str, ...] = ()
        tokens: list[int] = []
        n_tokens = n_chars = 0
        adapter = self.engine_adapter(specialist, version)
        text = self.prompt_text(req.chat, specialist) if self.policy == "prefix_affinity" else None
        if text is not None:
            hashes = tuple(block_hashes(text, block_chars=s.prefix_block_chars, seed=adapter,
                                        max_blocks=s.prefix_max_blocks))
            n_chars = len(text)
            tokens = self.prompt_tokens(text)
            n_tokens = len(tokens)
            if self.kv_follower is not None and tokens:
                kv_keys = tuple(block_keys_of_tokens(tokens, block_size=s.kv_events.block_size,
                                                     lora_id=lora_id_for(adapter), max_blocks=s.kv_events.max_blocks))
        # ties (nothing cached anywhere yet) and the home go by the prompt's own head (the first block past the
        # specialist's profile prompt), so requests sharing a system prompt meet on one replica even before the index
        # has them, and two applications' heads do not share one home; else by session, else request
        profile = self.profiles.get(specialist)
        head = head_block(hashes, text or "", profile.system_prompt if profile is not None else "", s.prefix_block_chars)
        tie_key = head or (f"{req.owner}\x00{req.session_id}" if req.session_id else req.request_id)
        engine_truth_only = bool(kv_keys) and self.kv_follower is not None and self.kv_follower.follows_all()
        return PlacementRequest(specialist, hashes, None, tie_key, kv_keys=kv_keys,
                                prompt_tokens=n_tokens, prompt_chars=n_chars, block_tokens=s.kv_events.block_size,
                                block_chars=s.prefix_block_chars, adapter=adapter, prompt_ids=tokens,
                                approximate=not engine_truth_only, fresh_counts=bool(req.session_id))

    async def place(self, req: RouteRequest, decision: Decision, session: SessionView | None,
                    replicas: Sequence[str], version: str | None = None, *,
                    ahead: tuple[PlacementRequest, Awaitable[Snapshot]] | None = None,
                    ) -> tuple[str | None, Placement | None, Snapshot | None, PlacementRequest]:
        """The replica for a decided request; `ahead`: its placement request and snapshot read already started."""
        same_specialist = session is not None and session.specialist == decision.specialist
        session_replica = session.replica if same_specialist and session else None
        preq = PlacementRequest(specialist=decision.specialist, session_replica=session_replica)
        if not replicas:
            return None, None, None, preq
        if req.replica_hint:
            try:
                wanted = normalize_url(req.replica_hint)
            except ValueError:
                raise InvalidHintError(f"engine_replica_hint {req.replica_hint!r} is not an http(s) URL") from None
            if wanted not in replicas:
                raise InvalidHintError(f"engine_replica_hint {req.replica_hint!r} is not a discovered base-group replica")
            return wanted, None, None, preq
        if ahead is not None:
            preq, snapshot = dataclasses.replace(ahead[0], session_replica=session_replica), await ahead[1]
        else:
            preq = dataclasses.replace(self.placement_request(req, decision.specialist, version),
                                       session_replica=session_replica,
                                       fresh_counts=bool(req.session_id) and session_replica is None)
            with_load = self.policy != "round_robin"
            snapshot = (self.snapshots.read_at_once(preq, with_load=with_load)
                        or await self.snapshots.read(preq, with_load=with_load))
        if self.policy == "prefix_affinity":
            snapshot = self.snapshots.caught_up(snapshot, preq)
            inventory = self.versions.inventory
            capacity = self.kv_follower.capacity if self.kv_follower is not None else {}
            snapshot = dataclasses.replace(snapshot, adapter_loaded={r: inventory.has(r, preq.adapter) for r in replicas},
                                           capacity=capacity)
        scored = with_claims(snapshot, preq, self.settings.head_group.min_share)
        placement = self.profile.run(preq, replicas, scored)
        if preq.fresh_counts and self._new_head(preq, scored, placement.replica):
            placement = await self._land(preq, scored, placement, replicas)
        self._claim_head(preq, scored, placement.replica)
        return placement.replica, placement, snapshot, preq

    def _new_head(self, preq: PlacementRequest, scored: Snapshot, replica: str) -> bool:
        """A request that starts (or moves) a session, or has none, whose head no replica holds or has claimed."""
        return (self.pending is not None and bool(preq.kv_keys) and preq.session_replica != replica
                and not holds_head(scored, self.settings.head_group.min_share))

    async def _land(self, preq: PlacementRequest, scored: Snapshot, placement: Placement,
                    replicas: Sequence[str]) -> Placement:
        """Lands a session's new head on the picked replica unless another router's new head just landed there; then
        its next best replica among those that scored within the home weight of the pick (a lost home, nothing more:
        a replica the spread or the cache scored lower keeps its lower score's reason). Requests without a session
        do not land: they would pay the round trip for a pile that never forms."""
        if self.pending is None or self.pending.landing_s <= 0 or self.cache_store.degraded:
            return placement
        held = await self.pending.land(placement.replica, preq.tie_key)
        if held is None:
            return placement
        best = placement.scores.get(placement.replica, 0.0)
        margin = self.settings.weights.home
        others = [r for r in replicas if r != placement.replica and placement.scores.get(r, float("-inf")) >= best - margin]
        if not others:
            return placement
        moved = self.profile.run(preq, others, scored)
        self.metrics.landings_moved.inc()
        self._spawn(self.pending.land(moved.replica, preq.tie_key))
        return moved

    def _claim_head(self, preq: PlacementRequest, scored: Snapshot, replica: str) -> None:
        """A new head (`_new_head`): claims it for `replica`, here at once and in the store in the background (never
        awaited). A head a replica holds or claimed already: the scorers count it, nothing to claim."""
        if self.pending is None or not self._new_head(preq, scored, replica):
            return
        write = self.pending.claim(preq.kv_keys, replica)
        if write is not None:
            if self.cache_store.degraded:
                write.close()  # the store is down: the claim is this router's alone
            else:
                self._spawn(write)

    async def route(self, req: RouteRequest, *, gate: Awaitable[Any] | None = None,
                    admit: AdmitOnRead | None = None) -> Route:
        """Decides and places one request; the caller forwards it, then calls `Route.release()`.

        `gate` (an asyncio future, e.g. the caller's limits, already running) is awaited after the classifier
        (before the judge, if it is asked) and before anything is placed or recorded, and if it raises, the
        request leaves no trace. `admit`: the limits' store call, sent in the session-and-states read's pipeline
        (the gate waits for its answer), so admission adds no round trip.
        """
        t0 = time.perf_counter()
        times = StepTimes()
        decided: tuple[Decision, SessionView | None] | None = None
        # the session and version states: one round trip, sent before anything else, so it overlaps the rest;
        # none at all without a session or limits to check when the states are pushed (held in memory)
        local = admit is None and not req.session_id and self.versions.pushed
        reading: asyncio.Future[tuple[SessionView | None, dict[str, SpecialistState]]]
        if local:
            reading = asyncio.get_running_loop().create_future()
            reading.set_result((None, self._pushed_states()))
        else:
            reading = asyncio.ensure_future(self.read_session_and_states(req, admit))
        early = None
        try:
            guess = self._guess(req)
            if guess is None and not req.forced and not req.session_id and not req.replica_hint:
                # no session to wait for: decide while the states read is in flight, then read ahead. A few loop
                # turns first, so its command (and the caller's limit check) is on the wire before the classifier
                # holds the loop: a store call yields to the loop before its command is written (redis-py's pool checks the
                # connection first).
                for _ in range(0 if local else SEND_TURNS):
                    await asyncio.sleep(0)
                decided = await self.decide(req, prefetched=(None,), times=times, gate=gate)
                guess = self._guess(req, decided[0].specialist)
            if guess is not None:  # the placement request's rendering and hashing run while the read is in flight
                ta = time.perf_counter()
                early = self._read_ahead(req, guess)
                times.placement_ms += (time.perf_counter() - ta) * 1000
            tw = time.perf_counter()
            session, states = await (reading if admit is None else asyncio.shield(reading))
            times.state_read_ms = (time.perf_counter() - tw) * 1000
            decision, session = decided or await self.decide(req, prefetched=(session,), times=times, gate=gate)
            if gate is not None:
                await _passed(gate)
            state = states[decision.specialist]
            choice = self.choose_version(req, decision, session, state)
            t1 = time.perf_counter()
            replicas = self.versions.filter_replicas(state, choice.version, await self.replicas())
            ahead = early if early is not None and guess == (decision.specialist, choice.version) else None
            early = None if ahead is not None else early
            replica, placement, snapshot, preq = await self.place(req, decision, session, replicas, choice.version,
                                                                  ahead=ahead)
        finally:
            if not reading.done():
                if admit is None:
                    reading.cancel()
                else:  # it carries the limits: it ends by itself and hands their verdict on
                    reading.add_done_callback(_consume)
            if early is not None:  # guessed wrong (or failed): its read is dropped
                early[1].cancel()
        t2 = time.perf_counter()
        self.metrics.read_ahead.labels("none" if guess is None else "hit" if early is None else "miss").inc()
        route = Route(decision, replica, placement, snapshot, session, (t1 - t0) * 1000, (t2 - t0) * 1000,
                      degraded=self.store.degraded, adapter=state.adapter, version=choice.version,
                      version_reason=choice.reason, canary=choice.canary, times=times)
        times.placement_ms += (t2 - t1) * 1000
        m = self.metrics
        m.decision_seconds.observe(t1 - t0)
        m.route_seconds.observe(t2 - t0)
        m.version_choices.labels(decision.specialist, choice.version or "unversioned", choice.reason).inc()
        self._publish_share(decision.specialist, state)
        route._commit = lambda served: self._record(req, decision, served, session, preq, snapshot, choice.version)
        usage = self.versions.usage
        usage.begin(decision.specialist, choice.version)
        if replica is None:
            route._release = lambda: usage.end(decision.specialist, choice.version)
            return route
        m.placements.labels(self.policy, replica).inc()
        if placement is not None and placement.guarded:
            m.balance_overrides.inc()
        if snapshot is not None and (snapshot.total_blocks or preq.kv_keys):
            m.prefix_match.observe(snapshot.prefix_share.get(replica, 0.0))
        if snapshot is not None:
            route.predicted_cached_tokens = snapshot.predicted_tokens.get(replica, 0)
            route.index_source = ("engine" if replica in snapshot.precise
                                  else "approximate" if replica in snapshot.predicted_tokens else "none")
            route.approx_age_ms = snapshot.approx_age_ms.get(replica, 0)
        self.tracker.begin(replica)
        if preq.prompt_ids and preq.specialist == decision.specialist:  # the specialist need not render it again
            route.prompt_ids, route.render_key = preq.prompt_ids, self.render_keys.get(decision.specialist, "")
        if self.policy == "prefix_affinity" and req.session_id:
            # every turn renews its session's count where it is served (once per spread window): the spread
            # scorer counts the sessions that are live on each replica, not the ones that started recently
            counted = self.snapshots.count_session(replica, session_key(req.owner, req.session_id))
            if counted is not None:
                self._spawn(counted)

        def release() -> None:
            self.tracker.end(replica)
            usage.end(decision.specialist, choice.version)

        route._release = release
        if preq.block_hashes:  # this router sees it at once; the store after the first chunk
            self.prefix_index.remember(preq.block_hashes, replica)
        return route

    async def end_session(self, owner: str, session_id: str) -> bool:
        """The caller ended a conversation: the session is forgotten, and counted out of the live sessions here
        and, through the placement store's channel, in every other router. Whether the key had such a session.
        Raises StoreUnavailableError when the session store does not answer."""
        key = session_key(owner, session_id)
        ended = await self.sessions.delete(owner, session_id)
        if self.session_ends is not None:
            self._count_out(key)
            try:
                await announce_end(self.cache_store, key)
            except StoreUnavailableError:  # the others count it out when its windows pass
                log.info("session end not announced: placement store unavailable")
        return ended

    def _count_out(self, session: str) -> None:
        written = self.snapshots.end_session(session)
        if written is not None:
            self._spawn(written)

    def observe_cached(self, route: Route, cached_tokens: int) -> bool | None:
        """The engine's own `cached_tokens` for a routed request: counts the index's over-claims, and teaches
        the approximate index's capacity model. Returns whether the index over-claimed (None: no prediction)."""
        if route.replica is None or route.index_source == "none":
            return None
        over = route.predicted_cached_tokens > cached_tokens
        self.metrics.index_predictions.labels(route.index_source).inc()
        if over:
            self.metrics.index_overclaims.labels(route.index_source).inc()
        if route.index_source == "approximate" and route.predicted_cached_tokens > 0:
            self.snapshots.learn(route.replica, age_ms=route.approx_age_ms, overclaimed=over)
        return over

    def _publish_share(self, specialist: str, state: SpecialistState) -> None:
        previous = self._canaries.get(specialist)
        if previous is not None and previous != state.canary:
            self.metrics.canary_share.labels(specialist, previous).set(0.0)
        if state.canary:
            self.metrics.canary_share.labels(specialist, state.canary).set(state.canary_share)
        self._canaries[specialist] = state.canary

    def choose_version(self, req: RouteRequest, decision: Decision, session: SessionView | None,
                       state: SpecialistState) -> VersionChoice:
        """The session's version when it stays with its specialist; else a new draw (canary share)."""
        pinned = session.adapter_version if session is not None and session.specialist == decision.specialist else None
        key = f"{req.owner}\x00{req.session_id}" if req.session_id else (req.request_id or str(id(req)))
        return self.versions.choose(state, pinned, key)

    # ------------------------------------------------------------ shared state, after the pick

    def _record(self, req: RouteRequest, decision: Decision, replica: str | None, session: SessionView | None,
                preq: PlacementRequest, snapshot: Snapshot | None,
                version: str = "") -> "asyncio.Task[Any] | None":
        """Writes the session and the served prefix in the background; returns the session write (the
        stream's end waits for it: `Route.settled`)."""
        session_write = None
        if preq.block_hashes and replica:
            self.prefix_index.remember(preq.block_hashes, replica)
        if req.session_id and not self.store.degraded:
            turns = (session.turns if session else 0) + 1
            view = SessionView(decision.specialist, version, replica or "", turns)
            session_write = self._spawn(self.sessions.put(req.owner, req.session_id, view))
        if preq.block_hashes and preq.approximate and replica and not self.cache_store.degraded:
            seen = snapshot.blocks_seen if snapshot is not None else ()
            self._spawn(self.prefix_index.record(preq.block_hashes, replica, seen))
        return session_write

    def _spawn(self, coro: Any) -> "asyncio.Task[Any] | None":
        if len(self._background) >= MAX_BACKGROUND_WRITES:
            coro.close()
            return None
        task = asyncio.get_running_loop().create_task(self._quietly(coro))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _quietly(self, coro: Any) -> None:
        try:
            await coro
        except StoreUnavailableError:
            pass
        except Exception:  # noqa: BLE001
            log.exception("background store write failed")

    async def flush(self) -> None:
        """Waits for pending background writes and publishes the load now (tests and benchmarks)."""
        while self._background:
            await asyncio.wait(list(self._background), timeout=5.0)
        try:
            await self.tracker.publish()
        except StoreUnavailableError:
            pass
