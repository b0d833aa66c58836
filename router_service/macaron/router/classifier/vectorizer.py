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

from macaron.router.classifier.features import BLOCKS, Bags, char_eligible, char_ngrams, structure_cues, token_list


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
                np.concatenate(data) if data else np.zeros(0),
                np.concatenate(indices) if indices else np.zeros(0, np.int64),
                np.asarray(indptr),
            ),
            shape=(len(bags), self.n_features),
        )


def bag_items(bags: Bags, block: str):
    return bags.block(block).items()


class InferenceFeaturizer:
    """The fast path's twin of `transform_one(analyze(text))`, same numbers, fewer Python steps.

    Training builds every n-gram string; at inference most words repeat, so each word's
    character n-grams are looked up once and kept as an array of column indices (a bounded
    cache), and only the request's distinct words and bigrams touch the vocabulary.
    """

    def __init__(self, vectorizer: TfidfVectorizer, max_cached_words: int = 100_000) -> None:
        self.word_vocab = vectorizer.vocab["word"]
        self.char_vocab = vectorizer.vocab["char"]
        self.struct_vocab = vectorizer.vocab["struct"]
        self.idf = vectorizer.idf
        self.weights = [vectorizer.block_weights[b] for b in BLOCKS]
        self._word_chars: dict[str, np.ndarray] = {}
        self._max_cached = max_cached_words
        self._empty = np.zeros(0, dtype=np.int64)

    def clear_cache(self) -> None:
        self._word_chars.clear()

    def _char_columns(self, word: str) -> np.ndarray:
        """Column indices (with repeats) of a word's character n-grams; empty for non-words."""
        if not char_eligible(word):
            cols = self._empty
        else:
            vocab = self.char_vocab
            found = [vocab[g] for g in char_ngrams(word) if g in vocab]
            cols = np.asarray(found, dtype=np.int64) if found else self._empty
        if len(self._word_chars) >= self._max_cached:
            self._word_chars.clear()
        self._word_chars[word] = cols
        return cols

    def _block(self, idx: np.ndarray, tf: np.ndarray, weight: float) -> np.ndarray:
        val = (1.0 + np.log(tf)) * self.idf[idx]
        return val * (weight / math.sqrt(float(val @ val)))

    def transform(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """(column indices, values) of one text, equal to the training path's row."""
        lowered = text.lower()
        tokens = token_list(lowered)
        counts = Counter(tokens)
        idx_parts: list[np.ndarray] = []
        val_parts: list[np.ndarray] = []
        get = self.word_vocab.get
        cached = self._word_chars.get
        w_idx: list[int] = []
        w_tf: list[int] = []
        arrays: list[np.ndarray] = []
        repeats: list[int] = []
        for token, n in counts.items():
            j = get(token)
            if j is not None:
                w_idx.append(j)
                w_tf.append(n)
            cols = cached(token)
            if cols is None:
                cols = self._char_columns(token)
            if cols.size:
                arrays.append(cols)
                repeats.append(n)
        for (a, b), n in Counter(zip(tokens, tokens[1:])).items():
            j = get(f"{a} {b}")
            if j is not None:
                w_idx.append(j)
                w_tf.append(n)
        if w_idx:
            ia = np.asarray(w_idx, dtype=np.int64)
            idx_parts.append(ia)
            val_parts.append(self._block(ia, np.asarray(w_tf, dtype=np.float64), self.weights[0]))
        if arrays:
            per = np.repeat(np.asarray(repeats, dtype=np.float64), [a.size for a in arrays])
            uniq, inverse = np.unique(np.concatenate(arrays), return_inverse=True)
            idx_parts.append(uniq)
            val_parts.append(self._block(uniq, np.bincount(inverse, weights=per), self.weights[1]))
        s_idx = [self.struct_vocab[c] for c in structure_cues(text, lowered) if c in self.struct_vocab]
        if s_idx:
            ia = np.asarray(s_idx, dtype=np.int64)
            idx_parts.append(ia)
            val_parts.append(self._block(ia, np.ones(len(s_idx)), self.weights[2]))
        if not idx_parts:
            return self._empty, np.zeros(0)
        return np.concatenate(idx_parts), np.concatenate(val_parts)
