"""Encoders load one at a time in a process: a classifier preloads MiniLM and the base model together, and two
threads importing `transformers` at once made one load fail now and then ("cannot import name 'AutoModel'"),
which left that encoder off for the process's life and the router a point or more less accurate."""

from __future__ import annotations

import threading
import time
from typing import Any

from macaron.router.classifier.escalation import Embedder


class CountingLoad(Embedder):
    """An Embedder whose load takes a while and records how many loads ran at the same moment."""

    running = 0
    most = 0
    guard = threading.Lock()

    def _load_model(self) -> Any:
        with CountingLoad.guard:
            CountingLoad.running += 1
            CountingLoad.most = max(CountingLoad.most, CountingLoad.running)
        time.sleep(0.2)
        with CountingLoad.guard:
            CountingLoad.running -= 1
        return object()


def test_encoders_started_together_load_one_at_a_time() -> None:
    encoders = [CountingLoad() for _ in range(3)]
    for encoder in encoders:
        encoder.start_loading()
    assert all(encoder.wait(10.0) for encoder in encoders)  # every one loads, none is left off
    assert CountingLoad.most == 1
