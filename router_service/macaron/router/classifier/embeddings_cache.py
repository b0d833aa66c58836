"""Sentence embeddings of training texts, cached on disk per text (embedding 7,600 texts takes minutes).

Each text is keyed by the SHA-256 of the encoder name and the text, so a changed text can never
reuse a stale vector, and adding lines to the data embeds only the new ones. Vectors live in
shards (`<key>.keys.npy` + `<key>.npy`) under the asset cache directory (`$MACARON_CACHE_DIR`,
else ~/.cache/macaron) in `router/embeddings/`; every run that embeds something writes one shard.
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


def text_key(text: str) -> str:
    return hashlib.sha256(ENCODER_NAME.encode() + b"\x00" + text.encode("utf-8")).hexdigest()[:32]


def texts_key(texts: Sequence[str]) -> str:
    digest = hashlib.sha256(ENCODER_NAME.encode())
    for text in texts:
        digest.update(b"\x00")
        digest.update(text.encode("utf-8"))
    return digest.hexdigest()[:32]


def _load_shards(folder: Path, wanted: set[str]) -> dict[str, np.ndarray]:
    found: dict[str, np.ndarray] = {}
    for keys_path in sorted(folder.glob("*.keys.npy")):
        vectors_path = keys_path.with_name(keys_path.name[: -len(".keys.npy")] + ".npy")
        try:
            keys = np.load(keys_path)
            if not any(str(k) in wanted for k in keys):
                continue
            vectors = np.load(vectors_path, mmap_mode="r")
        except (OSError, ValueError):
            continue  # a shard being written or damaged: its texts are embedded again
        if len(vectors) != len(keys):
            continue
        for i, k in enumerate(keys):
            kb = str(k)
            if kb in wanted:
                found[kb] = np.asarray(vectors[i])
    return found


def cached_embed(texts: Sequence[str], *, embedder: Embedder | None = None, progress: bool = True) -> np.ndarray:
    """(len(texts), dim) embeddings; only texts never embedded before reach the encoder."""
    folder = cache_dir()
    keys = [text_key(t) for t in texts]
    known = _load_shards(folder, set(keys)) if folder.is_dir() else {}
    missing = sorted({k: t for k, t in zip(keys, texts) if k not in known}.items())
    if missing:
        logger.info("embedding %d of %d texts (the rest are cached)", len(missing), len(texts))
        vectors = (embedder or Embedder()).encode([t for _, t in missing], batch_size=32, progress=progress)
        folder.mkdir(parents=True, exist_ok=True)
        name = texts_key([t for _, t in missing])
        np.save(folder / f"{name}.tmp.npy", vectors)
        (folder / f"{name}.tmp.npy").replace(folder / f"{name}.npy")
        np.save(folder / f"{name}.keys.tmp.npy", np.array([k for k, _ in missing], dtype="U32"))
        (folder / f"{name}.keys.tmp.npy").replace(folder / f"{name}.keys.npy")
        for (k, _), v in zip(missing, vectors):
            known[k] = v
    return np.stack([np.asarray(known[k], dtype=np.float32) for k in keys]) if keys else np.zeros((0, 384), np.float32)
