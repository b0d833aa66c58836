"""SpecialistClassifier: a request in, a RouteDecision out.

Path of one decision:
1. the request becomes weighted text segments plus tool signals (conversation.py);
2. the fast model gives calibrated probabilities in tens to hundreds of microseconds;
3. if its top probability is below the escalation threshold (chosen at training time on
   source hold-out data, see train.py) and escalation is on, the MiniLM head decides
   (its probabilities pooled with the fast model's by the trained weight);
4. tool priors are added to the agent logit (declared tools, tool calls or results).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from macaron.router.classifier.conversation import Conversation, from_messages, from_text
from macaron.router.classifier.errors import ClassificationInputError
from macaron.router.classifier.escalation import Embedder, EmbedderUnavailable, mix_embeddings
from macaron.router.classifier.model import AGENT, SHIPPED_ARTIFACT, Artifact, combine, softmax
from macaron.router.classifier.settings import ClassifierSettings


@dataclass(frozen=True, slots=True)
class RouteDecision:
    """The specialist for a request, with calibrated probabilities over the four and the confidence."""

    specialist: str
    probabilities: dict[str, float]
    confidence: float
    escalated: bool
    latency_ms: float


class SpecialistClassifier:
    """Thread-safe classifier over a trained artifact; build it with `SpecialistClassifier.load`."""

    def __init__(self, artifact: Artifact, settings: ClassifierSettings | None = None) -> None:
        self.settings = settings or ClassifierSettings()
        self.artifact = artifact
        self.labels = artifact.labels
        self.threshold = (
            self.settings.escalation_threshold
            if self.settings.escalation_threshold is not None
            else artifact.escalation_threshold
        )
        self._embedder: Embedder | None = None
        self._embedder_lock = threading.Lock()
        self._agent_index = self.labels.index("agent") if "agent" in self.labels else AGENT
        if self.settings.preload_embedder and self.escalation_enabled:
            self.embedder.start_loading()

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
    def embedder(self) -> Embedder:
        with self._embedder_lock:
            if self._embedder is None:
                self._embedder = Embedder(threads=self.settings.embedder_threads)
            return self._embedder

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

    def _priors(self, conversation: Conversation) -> np.ndarray:
        prior = np.zeros(len(self.labels))
        if conversation.has_tools:
            prior[self._agent_index] += self.settings.tools_agent_bias
        if conversation.has_tool_activity:
            prior[self._agent_index] += self.settings.tool_results_agent_bias
        return prior

    def fast_probabilities(self, conversation: Conversation) -> np.ndarray:
        return softmax(self.artifact.fast.logits(conversation) + self._priors(conversation))

    def embedding_probabilities(self, conversation: Conversation) -> np.ndarray:
        head = self.artifact.embedding
        assert head is not None
        vectors = self.embedder.encode([seg.text for seg in conversation.segments])
        mixed = mix_embeddings(vectors, [seg.weight for seg in conversation.segments])
        return softmax(head.logits(mixed) + self._priors(conversation))

    def classify(
        self,
        text: str | bytes | None = None,
        *,
        messages: Sequence[Mapping[str, Any]] | None = None,
        tools: Sequence[Any] | None = None,
        escalate: bool | None = None,
    ) -> RouteDecision:
        """Decides the specialist for one request (`text`, or OpenAI-style `messages` and `tools`).

        Raises ClassificationInputError for input that cannot be classified (empty, not UTF-8,
        no user turn). `escalate=False` forces the fast path for this call.
        """
        start = time.perf_counter()
        conversation = self.conversation(text, messages=messages, tools=tools)
        probs = self.fast_probabilities(conversation)
        escalated = False
        may_escalate = self.escalation_enabled if escalate is None else (escalate and self.escalation_enabled)
        if may_escalate and probs.max() < self.threshold:
            embedder = self.embedder
            if embedder.ready or embedder.wait(self.settings.wait_for_embedder_s):
                try:
                    p_embed = self.embedding_probabilities(conversation)
                except EmbedderUnavailable:
                    p_embed = None
                if p_embed is not None:
                    probs = combine(probs, p_embed, self.artifact.fast_weight_when_escalated)
                    escalated = True
        best = int(probs.argmax())
        return RouteDecision(
            specialist=self.labels[best],
            probabilities={label: float(p) for label, p in zip(self.labels, probs)},
            confidence=float(probs[best]),
            escalated=escalated,
            latency_ms=(time.perf_counter() - start) * 1000.0,
        )
