"""TF-IDF over the analyzer's bags: one vocabulary, one L2 norm and one weight per block.

`fit` learns the vocabulary (terms seen in at least `min_df` training texts) and smoothed
IDF; `transform_many` builds a CSR matrix for training; `transform_one` gives the sparse
row of one request as (indices, values) arrays, cheap enough for the fast path.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from macaron.router.classifier.features import BLOCKS, Bags


@dataclass
class TfidfVectorizer:
    """Vocabulary, IDF and block weights; `n_features` columns in block order word|char|struct."""

    vocab: dict[str, dict[str, int]]
    idf: np.ndarray
    block_weights: dict[str, float]

    @property
    def n_features(self) -> int:
        return int(self.idf.shape[0])

    @classmethod
    def fit(
        cls,
        bags: Sequence[Bags],
        *,
        min_df: int = 2,
        max_features_per_block: int | None = None,
        block_weights: dict[str, float] | None = None,
    ) -> "TfidfVectorizer":
        n_docs = len(bags)
        vocab: dict[str, dict[str, int]] = {}
        idf_parts: list[np.ndarray] = []
        offset = 0
        for block in BLOCKS:
            df: Counter[str] = Counter()
            for bag in bags:
                df.update(bag.block(block).keys())
            terms = [t for t, c in df.items() if c >= (1 if block == "struct" else min_df)]
            # Deterministic order: most frequent first, ties by the term itself.
            terms.sort(key=lambda t: (-df[t], t))
            if max_features_per_block is not None and block != "struct":
                terms = terms[:max_features_per_block]
            vocab[block] = {t: offset + i for i, t in enumerate(terms)}
            idf_parts.append(
                np.array([math.log((1 + n_docs) / (1 + df[t])) + 1.0 for t in terms], dtype=np.float64)
            )
            offset += len(terms)
        weights = {"word": 1.0, "char": 1.0, "struct": 0.5}
        weights.update(block_weights or {})
        return cls(vocab=vocab, idf=np.concatenate(idf_parts), block_weights=weights)

    def transform_one(self, bags: Bags) -> tuple[np.ndarray, np.ndarray]:
        """(column indices, values) of one text's row."""
        all_idx: list[int] = []
        all_val: list[float] = []
        for block in BLOCKS:
            block_vocab = self.vocab[block]
            idx: list[int] = []
            tfs: list[float] = []
            for term, count in bag_items(bags, block):
                j = block_vocab.get(term)
                if j is not None:
                    idx.append(j)
                    tfs.append(count)
            if not idx:
                continue
            ia = np.fromiter(idx, dtype=np.int64, count=len(idx))
            va = (1.0 + np.log(np.fromiter(tfs, dtype=np.float64, count=len(tfs)))) * self.idf[ia]
            norm = math.sqrt(float(va @ va))
            va *= self.block_weights[block] / norm
            all_idx.extend(ia.tolist())
            all_val.extend(va.tolist())
        return np.asarray(all_idx, dtype=np.int64), np.asarray(all_val, dtype=np.float64)

    def transform_many(self, bags: Sequence[Bags]) -> sparse.csr_matrix:
        indptr = [0]
        indices: list[np.ndarray] = []
        data: list[np.ndarray] = []
        for bag in bags:
            idx, val = self.transform_one(bag)
            indices.append(idx)
            data.append(val)
            indptr.append(indptr[-1] + len(idx))
        return sparse.csr_matrix(
            (
                np.concatenate(indices) if indices else np.zeros(0, np.int64),
                np.concatenate(data) if data else np.zeros(0),
                np.asarray(indptr),
            ),
            shape=(len(bags), self.n_features),
        )


def bag_items(bags: Bags, block: str):
    return bags.block(block).items()
