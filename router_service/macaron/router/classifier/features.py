"""Lexical features of the fast path: word n-grams, in-word character n-grams, structure cues.

One analyzer serves training and inference, so the two can never drift apart:
`analyze(text)` turns a text into three bags of strings (word uni/bigrams, character 3-5 grams
inside padded words, structure cues such as a code fence or a function signature). The
vectorizer maps those bags to TF-IDF weights (sublinear term frequency, one L2 norm per
block), and `LinearHead` in model.py turns them into logits with one sparse dot product.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

CHAR_NGRAM_RANGE = (3, 5)
MAX_WORD_LEN_FOR_CHARS = 24  # longer "words" (hashes, base64, minified code) give no char n-grams
BLOCKS = ("word", "char", "struct")

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")
_FENCE_RE = re.compile(r"```|~~~")
_INDENT_RE = re.compile(r"\n(?:    |\t)\S")
_CODE_LINE_RE = re.compile(r"[;{}]\s*(?:\n|$)")
_SIGNATURE_RE = re.compile(
    r"\bdef\s+\w+\s*\(|\bfunction\s*\w*\s*\(|\bclass\s+\w+\s*[:({]|=>|\w+\s*\([^()\n]*\)\s*(?:->|\{|:\s*\n)"
)
_HTML_RE = re.compile(r"</?[a-z][a-z0-9-]*(?:\s[^<>]*)?>")
_JSON_RE = re.compile(r"[{\[]\s*\"[^\"\n]+\"\s*:")
_SQL_RE = re.compile(r"\b(?:select\s+[\w*, ]+\s+from|insert\s+into|create\s+table|update\s+\w+\s+set)\b")
_SHELL_RE = re.compile(r"(?:^|\n)\s*(?:\$\s|sudo\s|pip\s+install|npm\s|git\s+\w)")
_URL_RE = re.compile(r"https?://|www\.")
_MONEY_RE = re.compile(r"[$€£]\s?\d")
_CAMEL_RE = re.compile(r"\b[a-z]+[A-Z]\w*\b|\b\w+_\w+\b")
_CALL_RE = re.compile(r"\b\w+(?:\.\w+)+\s*\(")


@dataclass(frozen=True, slots=True)
class Bags:
    """A text's three bags of features (term -> count)."""

    word: dict[str, int]
    char: dict[str, int]
    struct: dict[str, int]

    def block(self, name: str) -> dict[str, int]:
        return getattr(self, name)


def char_ngrams(word: str, lo: int = CHAR_NGRAM_RANGE[0], hi: int = CHAR_NGRAM_RANGE[1]) -> list[str]:
    padded = f" {word} "
    n_chars = len(padded)
    grams: list[str] = []
    for n in range(lo, hi + 1):
        if n > n_chars:
            break
        grams.extend(padded[i : i + n] for i in range(n_chars - n + 1))
    return grams


class CharNgramCache:
    """Memoises the character n-grams of a word (most words of real traffic repeat)."""

    def __init__(self, max_entries: int = 200_000) -> None:
        self._cache: dict[str, list[str]] = {}
        self._max = max_entries

    def __call__(self, word: str) -> list[str]:
        grams = self._cache.get(word)
        if grams is None:
            if len(self._cache) >= self._max:
                self._cache.clear()
            grams = char_ngrams(word)
            self._cache[word] = grams
        return grams


_DEFAULT_CACHE = CharNgramCache()


def structure_cues(raw: str, lowered: str | None = None) -> dict[str, int]:
    """Domain-independent shape of the request: code, markup, data, length.

    Each regular expression runs only when a cheap substring test says it could match."""
    low = raw.lower() if lowered is None else lowered
    cues: dict[str, int] = {}
    multiline = "\n" in raw
    has_paren = "(" in raw
    if ("```" in raw or "~~~" in raw) and _FENCE_RE.search(raw):
        cues["fence"] = 1
    if multiline and _INDENT_RE.search(raw):
        cues["indent"] = 1
    if (";" in raw or "{" in raw or "}" in raw) and _CODE_LINE_RE.search(raw):
        cues["codeline"] = 1
    if (has_paren or "=>" in raw or "class" in raw) and _SIGNATURE_RE.search(raw):
        cues["signature"] = 1
    if "<" in raw and _HTML_RE.search(low):
        cues["html"] = 1
    if '"' in raw and _JSON_RE.search(raw):
        cues["json"] = 1
    if ("select" in low or "insert" in low or "create" in low or "update" in low) and _SQL_RE.search(low):
        cues["sql"] = 1
    if ("$" in raw or "sudo" in raw or "pip" in raw or "npm" in raw or "git" in raw) and _SHELL_RE.search(raw):
        cues["shell"] = 1
    if ("http" in raw or "www." in raw) and _URL_RE.search(raw):
        cues["url"] = 1
    if ("$" in raw or "€" in raw or "£" in raw) and _MONEY_RE.search(raw):
        cues["money"] = 1
    if _CAMEL_RE.search(raw):
        cues["identifier"] = 1
    if has_paren and "." in raw and _CALL_RE.search(raw):
        cues["dotted_call"] = 1
    if multiline:
        cues["multiline"] = 1
    if raw.rstrip().endswith("?"):
        cues["question"] = 1
    cues[f"len{min(int(math.log2(len(raw) + 1)), 12)}"] = 1
    return cues


def token_list(lowered: str) -> list[str]:
    """Words (runs of letters, digits, _) and single punctuation marks of a lower-cased text."""
    return _TOKEN_RE.findall(lowered)


def char_eligible(token: str) -> bool:
    """Character n-grams come from words only, not from punctuation or very long runs."""
    return len(token) <= MAX_WORD_LEN_FOR_CHARS and (token[0].isalnum() or token[0] == "_")


def analyze(text: str, char_cache: CharNgramCache | None = None) -> Bags:
    """The feature bags of one (already bounded) text."""
    cache = char_cache or _DEFAULT_CACHE
    lowered = text.lower()
    tokens = token_list(lowered)
    words = Counter(tokens)
    chars: Counter[str] = Counter()
    for token, count in words.items():
        if not char_eligible(token):
            continue
        for gram in cache(token):
            chars[gram] += count
    bigrams = Counter(f"{a} {b}" for a, b in zip(tokens, tokens[1:]))
    words.update(bigrams)
    return Bags(word=dict(words), char=dict(chars), struct=structure_cues(text, lowered))
