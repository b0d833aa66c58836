"""Token ids of a rendered prompt, with the pieces between special tokens remembered.

The router (for placement) and the specialist (for the engine's input ids) tokenize every request's whole
rendered prompt, about 0.7 ms for 600 tokens, although most of it (the system prompt, the earlier turns) is what
they tokenized on the conversation's previous turn or for another session of the same application. A tokenizer
cuts its input at its added tokens before anything else and encodes each piece on its own, so a prompt's ids are
the concatenation of its pieces' ids: this cache splits the prompt there, encodes only the pieces it has not
seen, and keeps the recent pieces' ids (LRU). It is used only where that equivalence holds: no
normalizer, every added token matched as written (not normalized, no lstrip / rstrip / single_word), and no
special tokens added around the text; otherwise `for_backend` returns None and callers encode as before.
"""

from __future__ import annotations

import re
import threading
from array import array
from collections import OrderedDict
from typing import Any

MAX_PIECES = 4096
"""Pieces remembered (most recently used kept): enough for the system prompts and open conversations of one
process."""
MAX_TOKENS = 2_000_000
"""Ids remembered in all (4 bytes each, plus the pieces' text): the cache stays under about 20 MB whatever the
prompts' lengths."""
MIN_CACHED_CHARS = 32
"""Shorter pieces ("\\n", "assistant\\n") are encoded with the rest and not remembered: they cost nothing."""


class SegmentCache:
    """Encodes text as the backend does (no special tokens added), reusing the ids of pieces seen recently."""

    def __init__(self, backend: Any, splitter: re.Pattern[str], ids_of: dict[str, int]) -> None:
        self.backend = backend
        self.splitter = splitter
        self.ids_of = ids_of
        """Added token text → its id."""
        self._pieces: OrderedDict[str, array[int]] = OrderedDict()
        self._tokens = 0
        self._lock = threading.Lock()
        """The specialist may tokenize from worker threads."""
        self.hits = 0
        self.misses = 0

    @classmethod
    def for_backend(cls, backend: Any) -> SegmentCache | None:
        """A cache for this `tokenizers.Tokenizer`, or None where splitting at added tokens could change the ids."""
        try:
            if backend.normalizer is not None:
                return None
            added = backend.get_added_tokens_decoder()
        except AttributeError:
            return None
        if not added or any(t.normalized or t.lstrip or t.rstrip or t.single_word for t in added.values()):
            return None
        ids_of = {t.content: i for i, t in added.items()}
        # longest first: where one added token is a prefix of another, the longer one is matched, as the backend does
        alternatives = "|".join(re.escape(t) for t in sorted(ids_of, key=len, reverse=True))
        return cls(backend, re.compile(f"({alternatives})"), ids_of)

    def encode(self, text: str) -> list[int]:
        """The ids of `text` (no special tokens added), the same as `backend.encode(text, add_special_tokens=False)`."""
        parts = self.splitter.split(text)  # text, token, text, token, ..., text
        out: list[int] = []
        for index, part in enumerate(parts):
            if index % 2:
                out.append(self.ids_of[part])
            elif part:
                out.extend(self._piece(part))
        return out

    def _piece(self, piece: str) -> array[int] | list[int]:
        with self._lock:
            ids = self._pieces.get(piece)
            if ids is not None:
                self._pieces.move_to_end(piece)
                self.hits += 1
                return ids
            self.misses += 1
        # one encode call per new piece, not encode_batch: its thread pool would make a later fork warn and
        # turn parallelism off
        fresh = self.backend.encode(piece, add_special_tokens=False).ids
        if len(piece) >= MIN_CACHED_CHARS and len(fresh) <= MAX_TOKENS // 4:
            with self._lock:
                if piece not in self._pieces:
                    self._pieces[piece] = array("i", fresh)
                    self._tokens += len(fresh)
                while len(self._pieces) > MAX_PIECES or self._tokens > MAX_TOKENS:
                    self._tokens -= len(self._pieces.popitem(last=False)[1])
        return fresh
