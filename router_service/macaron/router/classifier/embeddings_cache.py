"""Sentence embeddings of training texts, cached on disk (embedding 7,600 texts takes minutes).

The cache key is the SHA-256 of the encoder name and every text, so a changed data file can
never reuse stale vectors. The cache lives under the asset cache directory
(`$MACARON_CACHE_DIR`, else ~/.cache/macaron) in `router/embeddings/`.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from macaron.router.classifier.escalation import ENCODER_NAME, Embedder

logger = logging.getLogger(__name__)


def cache_dir() -> Path:
    from macaron.assets.settings import default_cache_dir

    return Path(default_cache_dir()) / "router" / "embeddings"


def texts_key(texts: Sequence[str]) -> str:
    digest = hashlib.sha256(ENCODER_NAME.encode())
    for text in texts:
        digest.update(b"\x00")
        digest.update(text.encode("utf-8"))
    return digest.hexdigest()[:32]


def cached_embed(texts: Sequence[str], *, embedder: Embedder | None = None, progress: bool = True) -> np.ndarray:
    path = cache_dir() / f"{texts_key(texts)}.npy"
    if path.is_file():
        vectors = np.load(path)
        if vectors.shape[0] == len(texts):
            return vectors
    vectors = (embedder or Embedder()).encode(texts, batch_size=32, progress=progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, vectors)
    tmp.replace(path)
    return vectors
