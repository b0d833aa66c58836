"""Multi-turn sessions built from the routing data's dev split, so every specialist gets traffic.

Sessions share a few system prompts (the prefix cache's best case) and grow their history turn
after turn (each turn resends every earlier message plus the answers), as chat clients do. Each
session keeps to one topic (one label of the data), and sessions cycle through the labels.
"""

from __future__ import annotations

import random
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

SYSTEM_PROMPTS: tuple[str, ...] = (
    "You are Macaron, a helpful assistant. Answer briefly and precisely.",
    "You are a senior engineer on a product team. Be concise; prefer concrete steps.",
    "You are a friendly support agent. Keep answers short and polite.",
)


@dataclass
class Prompt:
    """One user turn and the specialist the routing data says it belongs to."""

    label: str
    text: str


@dataclass
class Session:
    """A conversation: its id, system prompt, topic, history and remaining turns."""

    session_id: str
    label: str
    system_prompt: str
    prompts: list[Prompt]
    history: list[dict[str, Any]] = field(default_factory=list)
    turn: int = 0

    @property
    def done(self) -> bool:
        return self.turn >= len(self.prompts)

    def next_messages(self) -> list[dict[str, Any]]:
        """The messages of the next turn: system prompt, every earlier turn and answer, the new question."""
        user = {"role": "user", "content": self.prompts[self.turn].text}
        return [{"role": "system", "content": self.system_prompt}, *self.history, user]

    def record(self, answer: str) -> None:
        """Adds this turn and its answer to the history (an empty answer keeps the history valid)."""
        self.history.append({"role": "user", "content": self.prompts[self.turn].text})
        self.history.append({"role": "assistant", "content": answer or "..."})
        self.turn += 1


def prompt_text(example: Any) -> str | None:
    """The user text of a routing example (its text, else its last user message's text)."""
    if getattr(example, "text", None):
        return str(example.text)
    for message in reversed(getattr(example, "messages", None) or []):
        content = message.get("content") if isinstance(message, dict) else None
        if message.get("role") == "user" and isinstance(content, str) and content.strip():
            return content
    return None


def load_dev_prompts(max_chars: int = 600) -> list[Prompt]:
    """Prompts of the dev split (clipped to `max_chars`), with their labels."""
    from macaron.router.classifier.data import load_split

    prompts = []
    for example in load_split("dev"):
        text = prompt_text(example)
        if text:
            prompts.append(Prompt(example.label, text[:max_chars]))
    if not prompts:
        raise RuntimeError("the routing data's dev split has no usable prompts")
    return prompts


class Workload:
    """Makes sessions: labels in turn, prompts drawn at random (seeded) from that label's prompts."""

    def __init__(self, prompts: list[Prompt], *, turns: int = 3, seed: int = 0) -> None:
        if not prompts:
            raise ValueError("a workload needs at least one prompt")
        self.turns = turns
        self._rng = random.Random(seed)
        self._by_label: dict[str, list[Prompt]] = defaultdict(list)
        for prompt in prompts:
            self._by_label[prompt.label].append(prompt)
        self.labels = sorted(self._by_label)
        self._count = 0

    def new_session(self) -> Session:
        label = self.labels[self._count % len(self.labels)]
        system_prompt = SYSTEM_PROMPTS[self._count % len(SYSTEM_PROMPTS)]
        self._count += 1
        prompts = [self._rng.choice(self._by_label[label]) for _ in range(self.turns)]
        return Session(f"load-{uuid.uuid4().hex[:12]}", label, system_prompt, prompts)
