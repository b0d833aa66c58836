"""The engine's token logprobs (ids) → OpenAI's logprobs entries (token text, exact bytes, top alternatives).

A token's bytes are exact for byte-level BPE vocabularies (GPT-2 style: Llama 3, Qwen2, SmolLM2),
where each character of the vocabulary entry stands for one byte; SentencePiece byte tokens
(`<0x0A>`) are one byte; any other token is the UTF-8 of its decoded text. `token` is the bytes
read as UTF-8 with invalid sequences replaced, so a character split over two tokens shows as
replacement characters there and whole in the joined `bytes`, as OpenAI documents. Logprobs
below OpenAI's -9999.0 ("very unlikely"; SGLang may send -inf or -999999999.0) are sent as -9999.0.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from macaron.engine_client import TokenLogprob as EngineLogprob
from macaron.specialist.events import Logprobs, TokenLogprob, TopLogprob

_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
LOGPROB_FLOOR = -9999.0


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, reversed: printable bytes stand for themselves, the other 68 for
    chr(256 + n) in byte order (the same table as transformers' `bytes_to_unicode`, without importing it)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {chr(b): b for b in printable}
    others = [b for b in range(256) if b not in set(printable)]
    table.update({chr(256 + n): b for n, b in enumerate(others)})
    return table


class TokenBytes:
    """Token id → (text, bytes), cached per id."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._cache: dict[int, tuple[str, bytes]] = {}
        self._sentencepiece: bool | None = None

    def __call__(self, token_id: int) -> tuple[str, bytes]:
        cached = self._cache.get(token_id)
        if cached is None:
            raw = self._bytes(token_id)
            cached = self._cache[token_id] = (raw.decode("utf-8", errors="replace"), raw)
        return cached

    def _bytes(self, token_id: int) -> bytes:
        piece = self.tokenizer.convert_ids_to_tokens(token_id)
        if isinstance(piece, str) and piece:
            decoder = _byte_decoder()
            if all(ch in decoder for ch in piece) and not self._is_sentencepiece:
                return bytes(decoder[ch] for ch in piece)
            byte = _BYTE_TOKEN.match(piece)
            if byte:
                return bytes([int(byte.group(1), 16)])
        return str(self.tokenizer.decode([token_id])).encode("utf-8")

    @property
    def _is_sentencepiece(self) -> bool:
        """A SentencePiece vocabulary marks spaces with "▁"; its pieces are text, not byte stand-ins."""
        if self._sentencepiece is None:
            ids = self.tokenizer.encode(" a b", add_special_tokens=False)
            self._sentencepiece = "▁" in "".join(self.tokenizer.convert_ids_to_tokens(ids))
        return self._sentencepiece

    def logprobs(self, entries: list[EngineLogprob]) -> Logprobs:
        """A Logprobs event for the engine's entries."""
        out = []
        for e in entries:
            text, raw = self(e.token_id)
            tops = tuple(TopLogprob(self(t)[0], max(logprob, LOGPROB_FLOOR), self(t)[1]) for t, logprob in e.top)
            out.append(TokenLogprob(text, max(e.logprob, LOGPROB_FLOOR), raw, tops))
        return Logprobs(tuple(out))
