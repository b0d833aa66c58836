"""The judge: when the fast classifier is unsure, the L0 chat adapter picks the specialist on the engine.

One short prompt (the newest user turn, its tail cut to `judge_max_chars`; before it up to
`history_turns` earlier user turns, each cut to a fifth of that, because a follow-up such as "now
make it a web page" means nothing alone; plus the names of the offered tools) rendered with the
model's chat template, decoded under the regex
`(chat|agent|code|ui)` with the chat adapter, greedy, a few tokens, no retries, within the
request's remaining time capped by `judge_timeout_s` (a caller with 0.2 s left does not wait
0.5 s for the judge and then miss its deadline in the engine). Any failure or timeout returns
None and the pipeline falls back to chat.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any, Sequence

from macaron.engine_client import AsyncEngineClient, EngineClientError, EngineTimeoutError
from macaron.ports import SPECIALISTS
from macaron.prompting import ChatRequest

log = logging.getLogger(__name__)

JUDGE_REGEX = "(" + "|".join(SPECIALISTS) + ")"
JUDGE_SYSTEM = (
    "Route the user's request to one assistant. Answer with one word: "
    "chat (conversation, questions, advice), agent (tasks that use tools or act for the user), "
    "code (programming, debugging, repositories), ui (designing an app screen or user interface)."
)


def judge_prompt_messages(chat: ChatRequest, max_chars: int, history_turns: int = 2) -> list[dict[str, str]]:
    """The judge's conversation: its instruction, earlier user turns, the newest one (tail-cut), tool names."""
    users = [m.content for m in chat.messages if m.role == "user" and m.content]
    text = users[-1] if users else (chat.messages[-1].content if chat.messages else "")
    text = text[:max_chars]
    earlier = users[:-1][-history_turns:] if history_turns > 0 else []
    if earlier:
        cut = max(1, max_chars // 5)
        lines = "\n".join(f"- {t[:cut]}" for t in earlier)
        text = f"Earlier requests in this conversation:\n{lines}\n\nNewest request (route this one):\n{text}"
    if chat.tools:
        text += "\n\n(tools offered: " + ", ".join(t.name for t in chat.tools[:16]) + ")"
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": text}]


class Judge:
    """Asks the chat adapter on one of the base-group replicas (in turn)."""

    def __init__(self, tokenizer: Any, lora_path: str, *, timeout_s: float, max_chars: int,
                 api_key: str | None = None, history_turns: int = 2) -> None:
        self.api_key = api_key
        self.history_turns = history_turns
        self.tokenizer = tokenizer
        self.lora_path = lora_path
        self.timeout_s = timeout_s
        self.max_chars = max_chars
        self._clients: dict[str, AsyncEngineClient] = {}
        self._turn = itertools.count()

    def prompt(self, chat: ChatRequest) -> str:
        return str(self.tokenizer.apply_chat_template(
            judge_prompt_messages(chat, self.max_chars, self.history_turns), tokenize=False, add_generation_prompt=True
        ))

    def _client(self, url: str) -> AsyncEngineClient:
        if url not in self._clients:
            self._clients[url] = AsyncEngineClient(url, timeout=self.timeout_s, max_retries=0, api_key=self.api_key)
        return self._clients[url]

    async def ask(self, chat: ChatRequest, replicas: Sequence[str], *,
                  remaining_s: float | None = None) -> tuple[str | None, str]:
        """(one of the four names, "") or (None, why it failed). `remaining_s`: the request's time left (None:
        no deadline); the call gets that much, at most `timeout_s`."""
        if not replicas:
            return None, "found no engine replica"
        timeout = self.timeout_s if remaining_s is None else min(self.timeout_s, remaining_s)
        if timeout <= 0:
            return None, "timed out (no time left before the request's deadline)"
        url = replicas[next(self._turn) % len(replicas)]
        try:
            result = await asyncio.wait_for(
                self._client(url).generate(
                    text=self.prompt(chat),
                    sampling_params={"max_new_tokens": 8, "temperature": 0.0, "regex": JUDGE_REGEX},
                    lora_path=self.lora_path,
                    timeout=timeout,
                ),
                timeout,
            )
        except (asyncio.TimeoutError, EngineClientError) as exc:
            kind = "timed out" if isinstance(exc, (asyncio.TimeoutError, EngineTimeoutError)) else "failed"
            log.info("judge %s on %s: %s", kind, url, exc)
            return None, f"{kind} ({exc.__class__.__name__})"
        answer = result.text.strip().lower()
        if answer in SPECIALISTS:
            return answer, ""
        return None, f"answered {answer[:20]!r}"

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()
