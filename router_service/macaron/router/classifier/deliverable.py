"""The sentence of a request that says what to make ("Build a disruption view with ...").

A long request often opens with the user's situation and ends with what they want made: "My flight is
delayed and I may miss the connection. Build a disruption view with the itinerary, ...". Read whole, the
situation's words (a flight, a connection) outvote the one sentence that names the deliverable, and the fast
path sends a generative-UI request to the personal agent at 0.72. Read alone, that sentence says `ui` at 0.82.
The fast model therefore also reads the request's deliverable sentences and mixes both readings
(`FastModel.deliverable_weight`, chosen on the source hold-out by `train.choose_deliverable_weight`).

A sentence is a deliverable when it opens, after a short framing clause ("For the clinic, ") and polite or
sequencing words ("please", "can you", "now"), with a verb of making (build, create, write, set up, ...). Only
requests of two sentences or more qualify, and only where those sentences are not nearly the whole text: a
one-sentence request is its own deliverable.
"""

from __future__ import annotations

import re

import numpy as np

MAKING_VERBS = (
    "build", "create", "make", "design", "generate", "develop", "implement", "write", "set up", "put together",
    "prepare", "draft", "produce", "give me", "show me", "compose", "code", "program", "render", "mock up", "lay out",
)
LEADING_WORDS = (
    "please", "now", "then", "so", "and", "also", "next", "finally", "can you", "could you", "would you", "will you",
    "i want you to", "i need you to", "i'd like you to", "help me", "let's", "lets",
)
# A short framing clause before the verb: "For the tutoring centre, build me ...", "Using my notes, write ...".
FRAMING_WORDS = ("for", "with", "using", "based on", "from")


def _any_of(phrases: tuple[str, ...]) -> str:
    """A regex group matching any of the phrases, any run of whitespace between their words."""
    return "(?:" + "|".join(re.escape(p).replace(r"\ ", r"\s+") for p in phrases) + ")"


_FRAMING = "(?:" + _any_of(FRAMING_WORDS) + r"\s[^,.;:!?]{1,60},\s*)?"
_LEAD = _FRAMING + "(?:" + _any_of(LEADING_WORDS) + r"[,\s]+)*"
_VERB = _any_of(MAKING_VERBS)
_OPENS_WITH_MAKING = re.compile(r"^\W*" + _LEAD + _VERB + r"\b", re.IGNORECASE)
_SENTENCE_BREAK = re.compile(r"(?<=[.!?;:])\s+|\n+")
# Deliverable sentences covering this share of the text or more are the request itself: nothing to mix.
NEARLY_WHOLE = 0.9


def sentences(text: str) -> list[str]:
    """The text's sentences and lines, stripped, empty ones dropped."""
    return [part.strip() for part in _SENTENCE_BREAK.split(text) if part and part.strip()]


def deliverable_sentences(text: str) -> str | None:
    """The request's sentences that open with a verb of making, joined; None for a one-sentence request, one
    with no such sentence, or one whose such sentences are nearly all of it."""
    parts = sentences(text)
    if len(parts) < 2:
        return None
    making = [part for part in parts if _OPENS_WITH_MAKING.match(part)]
    if not making:
        return None
    joined = " ".join(making)
    return None if len(joined) >= NEARLY_WHOLE * len(text.strip()) else joined


def mix_deliverable(whole: np.ndarray, own: np.ndarray, weight: float) -> np.ndarray:
    """The whole text's logits mixed with its deliverable sentences': (1 - weight) x whole + weight x own. One
    formula for serving (`FastModel.raw_text_logits`) and training (`train.fast_logits`, the hold-out's choice)."""
    return (1.0 - weight) * whole + weight * own
