"""Request + profile + tokenizer → the exact prompt text the engine sees.

How a caller's system message combines with the profile's (the one rule, documented):

1. The profile's system prompt comes first.
2. Every system (or developer) message at the *start* of the conversation follows it, in order,
   each separated by a blank line ("\\n\\n"); together they become the single system turn the
   chat template renders first (and, with tools, the text before the tool list).
3. A system message later in the conversation stays where it is, as its own system turn.
4. An empty profile prompt adds nothing: the caller's system text is used unchanged.

Tools are rendered by the model's own chat template (OpenAI `tools` shape) unless
`tool_choice` is `none`. When a call is forced (`required` or a named function), the profile's
`tool_call_prefix` (the text that opens a call in the model's format, e.g. "<tool_call>\\n") is
appended after the generation prompt, so constrained decoding only has to produce the call's JSON.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Protocol

from macaron.prompting.messages import ChatRequest, Message

SYSTEM_SEPARATOR = "\n\n"
RENDER_RULES = 1
"""The version of this module's rules, part of every render key: bump it when `render` changes what it makes
of a request, so that a router and a specialist running different releases never share token ids."""


class PromptProfile(Protocol):
    """What rendering needs from a specialist profile."""

    @property
    def system_prompt(self) -> str: ...

    @property
    def tool_call_prefix(self) -> str: ...


class ChatTokenizer(Protocol):
    """A transformers tokenizer with a chat template."""

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...


def combine_system(profile_prompt: str, messages: tuple[Message, ...]) -> tuple[str, int]:
    """(combined system text, number of leading system messages it absorbed)."""
    leading = 0
    while leading < len(messages) and messages[leading].role == "system":
        leading += 1
    parts = [profile_prompt] if profile_prompt else []
    parts += [m.content for m in messages[:leading] if m.content]
    return SYSTEM_SEPARATOR.join(parts), leading


def template_messages(request: ChatRequest, profile: PromptProfile) -> list[dict[str, Any]]:
    """The conversation as chat-template dicts (OpenAI shape), the system rule applied."""
    system, absorbed = combine_system(profile.system_prompt, request.messages)
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for m in request.messages[absorbed:]:
        entry: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.name:
            entry["name"] = m.name
        if m.tool_calls:
            entry["tool_calls"] = [
                # A dict, as Hugging Face chat templates expect: Qwen2.5's and Llama 3.1's apply `| tojson`
                # to it, which would encode a JSON string a second time.
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _arguments(c.arguments)}}
                for c in m.tool_calls
            ]
        if m.tool_call_id:
            entry["tool_call_id"] = m.tool_call_id
        out.append(entry)
    return out


def _arguments(text: str) -> Any:
    """The arguments object of a JSON text (kept as text when it is not JSON: the template shows it as is)."""
    try:
        return json.loads(text or "{}")
    except json.JSONDecodeError:
        return text


def render(request: ChatRequest, profile: PromptProfile, tokenizer: ChatTokenizer) -> str:
    """The prompt text for `request` under `profile` (the same text wherever it is rendered)."""
    if request.prompt is not None:
        return request.prompt  # a plain completion: the caller wrote the whole prompt
    tools = [t.openai_dict() for t in request.tools] if request.tool_choice.mode != "none" else []
    text = tokenizer.apply_chat_template(
        template_messages(request, profile),
        tools=tools or None,
        tokenize=False,
        add_generation_prompt=True,
    )
    if request.tool_choice.forces_call:
        text += profile.tool_call_prefix
    return str(text)


def render_key(profile: PromptProfile, tokenizer: Any) -> str | None:
    """Names everything `render` and tokenizing depend on besides the request: the tokenizer (its `identity`:
    vocabulary, merges, chat templates, special tokens), the profile's system prompt and tool-call prefix. A
    router that tokenized a request under one key hands its ids to a specialist with the same key, which then
    need not render and tokenize the prompt again. None when the tokenizer has no identity (e.g. one loaded
    through transformers): ids are then never handed on."""
    identity = getattr(tokenizer, "identity", "")
    if not identity:
        return None
    digest = hashlib.blake2b(digest_size=12)
    for part in (str(RENDER_RULES), identity, profile.system_prompt, profile.tool_call_prefix):
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return digest.hexdigest()
