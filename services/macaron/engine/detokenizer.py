"""Output text, token by token: incremental decoding that never emits half a UTF-8 character,
and stop-string / stop-regex matching on the decoded text.

While streaming, text that may still become the start of a stop match is held back (a tail that
is a prefix of a stop string; for stop_regex, from where a partial match of the pattern begins,
found with the `regex` module's partial matching), so a stop sequence is never streamed to the
client and then retracted from the final text.

Decoding a window of recent tokens twice (up to the last emitted token, and up to the newest)
and taking the difference gives the new text even for tokenizers whose pieces depend on their
neighbours (SentencePiece's leading space); while the newest bytes do not yet form a whole
character, the decoded window ends in U+FFFD and nothing is emitted.
"""

from __future__ import annotations

import re
from typing import Any

import regex


class IncrementalDetokenizer:
    """Decoded text of one request's output so far, plus stop matching and hold-back."""

    def __init__(
        self,
        tokenizer: Any,
        *,
        skip_special_tokens: bool = True,
        stop: list[str] | None = None,
        stop_regex: list[str] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.stop = list(stop or [])
        self.stop_regex = [re.compile(p) for p in stop_regex or []]
        self._partial_regex = [_partial_pattern(p) for p in stop_regex or []]
        self.text = ""
        self._prefix = 0
        self._read = 0

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def update(self, output_ids: list[int]) -> str:
        """Decodes the newest tokens; returns the text they completed (may be empty)."""
        prefix_text = self._decode(output_ids[self._prefix : self._read])
        new_text = self._decode(output_ids[self._prefix :])
        if len(new_text) <= len(prefix_text) or new_text.endswith("\ufffd"):
            return ""
        delta = new_text[len(prefix_text) :]
        self._prefix, self._read = self._read, len(output_ids)
        self.text += delta
        return delta

    def final_text(self, output_ids: list[int]) -> str:
        """The whole output decoded at once (exact, including a trailing partial character)."""
        return self._decode(output_ids)

    def find_stop(self, new_chars: int) -> tuple[int, str] | None:
        """(index in text where a stop string or stop regex match starts, what matched) or None.

        Only the tail that the last `new_chars` characters could have completed is searched.
        """
        if not new_chars:
            return None
        best: tuple[int, str] | None = None
        for s in self.stop:
            start = max(0, len(self.text) - new_chars - len(s) + 1)
            i = self.text.find(s, start)
            if i != -1 and (best is None or i < best[0]):
                best = (i, s)
        for pattern in self.stop_regex:
            m = pattern.search(self.text)
            if m is not None and (best is None or m.start() < best[0]):
                best = (m.start(), pattern.pattern)
        return best

    def visible_length(self) -> int:
        """Characters of `text` safe to stream: a tail that could begin a stop string is held back."""
        n = len(self.text)
        hold = 0
        for s in self.stop:
            for k in range(min(len(s) - 1, n), 0, -1):
                if self.text.endswith(s[:k]):
                    hold = max(hold, k)
                    break
        visible = n - hold
        for pattern in self._partial_regex:
            if pattern is None:
                continue
            m = pattern.search(self.text, partial=True)
            if m is not None and m.partial:
                visible = min(visible, m.start())
        return visible


def _partial_pattern(pattern: str) -> Any:
    """The stop regex compiled by `regex` (which can report partial matches); None if only `re`
    understands it (then nothing is held back for it: `re` cannot say a match may be under way)."""
    try:
        return regex.compile(pattern)
    except regex.error:
        return None
