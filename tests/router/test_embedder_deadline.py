"""The encoder's deadline: under overload an escalation (or a conversation turn's follow-up embedding) gives up
after `embed_timeout_s`, leaves the queue, and the request keeps its fast answer; the worker goes on serving."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from macaron.router.classifier import ClassifierSettings, SpecialistClassifier
from macaron.router.classifier.escalation import Embedder, EmbedderBusy


class SlowEncoder(Embedder):
    """An Embedder whose encoder call takes `delay_s` (an overloaded CPU), counting the texts it encoded."""

    def __init__(self, delay_s: float) -> None:
        super().__init__(window_s=0.0)
        self.delay_s = delay_s
        self.encoded: list[str] = []
        self.release = threading.Event()
        self._model = object()  # "loaded": encode below never touches it
        self._loaded.set()

    def encode(self, texts, *, batch_size: int = 32, progress: bool = False) -> np.ndarray:
        self.release.wait(self.delay_s)
        self.encoded += list(texts)
        return np.ones((len(texts), 384), dtype=np.float32) / np.sqrt(384)


def test_a_request_past_its_deadline_leaves_the_queue_and_the_worker_goes_on() -> None:
    embedder = SlowEncoder(delay_s=5.0)
    first = threading.Thread(target=lambda: embedder.encode_batched(["occupies the worker"], timeout=10.0))
    first.start()
    time.sleep(0.1)  # the worker is now busy with the first text
    started = time.perf_counter()
    with pytest.raises(EmbedderBusy):
        embedder.encode_batched(["gives up"], timeout=0.2)
    assert time.perf_counter() - started < 1.0
    embedder.release.set()  # the overload ends
    first.join(5.0)
    assert embedder.encode_batched(["served afterwards"], timeout=5.0).shape == (1, 384)
    assert "gives up" not in embedder.encoded  # cancelled before the worker took it: never encoded
    assert embedder.encoded == ["occupies the worker", "served afterwards"]


def test_a_busy_encoder_keeps_the_fast_answer(fast_classifier) -> None:
    classifier = SpecialistClassifier(fast_classifier.artifact, ClassifierSettings(embed_timeout_s=0.2,
                                                                                  escalation_threshold=1.0))
    slow = SlowEncoder(delay_s=3.0)
    classifier._embedder = slow
    blocker = threading.Thread(target=lambda: slow.encode_batched(["occupies the worker"], timeout=10.0))
    blocker.start()
    time.sleep(0.1)
    started = time.perf_counter()
    decision = classifier.classify("I need help with something")  # unsure: would escalate
    assert time.perf_counter() - started < 1.5
    assert not decision.escalated and decision.specialist in classifier.labels
    messages = [{"role": "user", "content": "Write a Python function that merges two sorted lists."},
                {"role": "assistant", "content": "def merge(a, b): ..."}, {"role": "user", "content": "what do you mean?"}]
    decision = classifier.classify(messages=messages, session="code")  # its follow-up embedding times out too
    assert not decision.escalated
    slow.release.set()
    blocker.join(5.0)
