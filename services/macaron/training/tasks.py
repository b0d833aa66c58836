"""What each specialist's adapter must learn, as code: its prompts, its teacher, its check.

For every specialist a `SpecialistTask` says which routing prompts train it, how the teacher is
prompted (a long profile prompt; constrained decoding where the answer has a grammar), what the
student sees (the request as the specialist serves it), and the measurable property of a good
answer that `macaron adapters eval` counts:

| task | teacher | a good answer (eval) |
|---|---|---|
| chat | long conversational prompt, greedy | finishes within its budget, prose only (no code, JSON or tool call) |
| agent | tools offered, forced call (JSON-schema constrained) | a well-formed call of an offered tool, arguments valid |
| agent, no tools offered | says it cannot act here and gives the next step, greedy | a finished prose answer (as chat) |
| code | long coding prompt, greedy | contains a fenced code block |
| ui | one of five A2UI skeletons (`a2ui_teacher.py`): structure fixed by the grammar, words the teacher's | the whole answer is valid A2UI v0.9 (official SDK, basic catalog) |

Why agent also learns requests without tools: the router sends "set an alarm for 6:30" to agent
whether or not the client declared tools, and an adapter that only ever saw tools answered such a
request with noise. `without_tools_share` of agent's prompts are asked with no tools offered.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, replace
from typing import Any, Callable

from macaron.training.tool_catalog import tools_for

TEACHER_PROMPTS: dict[str, str] = {
    "chat": (
        "You are Macaron, a helpful, concise assistant. Answer the user's message directly and correctly "
        "in plain prose: at most three short sentences, or a short list when the user asks for several "
        "items. Work out arithmetic step by step in one or two lines and give the result. Do not write code, "
        "JSON or markup."
    ),
    "agent": (
        "You are Macaron's agent. You act for the user through the offered tools. Pick the one tool that "
        "does what the user asks and call it with arguments taken from the request."
    ),
    "agent_without_tools": (
        "You are Macaron's agent. No tools are available in this conversation, so you cannot carry out "
        "actions or look anything up yourself. Answer in plain prose, in at most three short sentences: "
        "say what you cannot do here and give the most useful next step (how the user can do it, or what "
        "to ask for). If the request only needs knowledge, answer it directly. Do not write code, JSON or "
        "tool calls."
    ),
    "code": (
        "You are Macaron's coding assistant. Always answer with working code in one fenced Markdown block "
        "that names its language, for example ```python, then explain it in one or two sentences. Keep the "
        "code short, correct and idiomatic; use the language the user names, else Python."
    ),
    "ui": (
        "You are Macaron's interface designer. You write the texts of one interface for the user's request. The "
        "interface is {shape}. Answer with one JSON object of these texts, written for the user's request, a few "
        "plain words each (the title names what the page is for); name actions in snake_case after what they do."
    ),
}

# Two worked answers put before an agent request asked with no tools: the 135M teacher, told only
# in words, often invented the result it could not fetch ("your card expires 2023-01-01").
WITHOUT_TOOLS_EXAMPLES: tuple[tuple[str, str], ...] = (
    (
        "Book a table for two at Nopa tonight at 7",
        "I can't make bookings from this chat, because no booking tool is connected. You can reserve on "
        "Nopa's website or by calling them; ask for a table for two at 7 pm.",
    ),
    (
        "what's the balance on my checking account",
        "I can't see your accounts from here, since no banking tool is connected. Your bank's app or "
        "website shows the balance of your checking account.",
    ),
)
_LIMITATION = re.compile(r"\b(can't|cannot|can not|unable|not able|don't have|do not have|no access|not connected)\b|\?", re.I)

MAX_NEW_TOKENS: dict[str, int] = {"chat": 160, "agent": 160, "code": 320, "ui": 480}
_FENCE = re.compile(r"```[A-Za-z0-9_+#.-]*\n.*?```", re.DOTALL)


@dataclass(frozen=True)
class Plan:
    """One prompt's generation: chat-template messages, tools, and engine constraints."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    json_schema: str | None = None
    text_prefix: str = ""  # appended to the rendered prompt (a forced call's opening tag)


@dataclass(frozen=True)
class SpecialistTask:
    name: str
    serving_prompt: str
    without_tools_share: float = 0.0  # agent: the share of prompts asked with no tools offered

    def tools(self, prompt: str, seed: int) -> list[dict[str, Any]] | None:
        """The tools offered with a prompt: agent's catalog tools, except a seeded `without_tools_share`."""
        if self.name != "agent" or random.Random(f"tools:{seed}:{prompt}").random() < self.without_tools_share:
            return None
        return tools_for(prompt, seed)

    def student(self, prompt: str, tools: list[dict[str, Any]] | None, with_profile: bool = True) -> Plan:
        """The request as the specialist serves it (profile prompt first), unconstrained."""
        system = [{"role": "system", "content": self.serving_prompt}] if with_profile and self.serving_prompt else []
        return Plan(messages=[*system, {"role": "user", "content": prompt}], tools=tools)

    def teacher(self, prompt: str, tools: list[dict[str, Any]] | None) -> Plan:
        """The teacher's request: the long prompt, and a grammar where the answer has one."""
        messages = [{"role": "system", "content": TEACHER_PROMPTS[self.name]}, {"role": "user", "content": prompt}]
        if self.name == "agent" and not tools:
            shots = [{"role": role, "content": text} for pair in WITHOUT_TOOLS_EXAMPLES
                     for role, text in zip(("user", "assistant"), pair)]
            system = {"role": "system", "content": TEACHER_PROMPTS["agent_without_tools"]}
            return Plan([system, *shots, messages[-1]], None)
        if self.name == "agent":
            from macaron.prompting.messages import ToolSpec
            from macaron.specialist.tool_parsers import get_parser

            parser = get_parser("hermes")
            specs = tuple(ToolSpec(name=t["function"]["name"], parameters=t["function"]["parameters"]) for t in tools or [])
            return Plan(messages, tools, json.dumps(parser.forced_call_schema(specs)), parser.call_prefix)
        if self.name == "ui":  # a skeleton fixes the structure; the teacher writes the words
            from macaron.training.a2ui_teacher import DESCRIPTIONS, skeleton_for, teacher_schema

            shape = skeleton_for(prompt)
            messages[0]["content"] = TEACHER_PROMPTS["ui"].format(shape=DESCRIPTIONS[shape])
            return Plan(messages, None, json.dumps(teacher_schema(shape)))
        return Plan(messages, None)

    def target(self, plan: Plan, text: str, finish_type: str) -> str | None:
        """The training target from a teacher answer, or None when the answer is unusable."""
        text = text.strip()
        if finish_type != "stop" or not text:
            return None
        if self.name == "agent" and not plan.tools:  # an honest limit or a question, not an invented result
            return text if self.good(text, None) and _LIMITATION.search(text) else None
        if self.name == "agent":
            return f"{plan.text_prefix}{json.dumps(json.loads(text), ensure_ascii=False)}\n</tool_call>"
        if self.name == "ui":  # the skeleton filled with the teacher's words; only what the SDK accepts
            from macaron.a2ui import validate_a2ui
            from macaron.training.a2ui_teacher import fill, skeleton_for

            messages = fill(skeleton_for(plan.messages[-1]["content"]), json.loads(text))
            return json.dumps(validate_a2ui(json.dumps(messages, ensure_ascii=False)), ensure_ascii=False)
        return text if self.good(text, plan.tools) else None

    def good(self, text: str, tools: list[dict[str, Any]] | None, served: bool = False) -> bool:
        """The property `adapters eval` counts for this specialist (see the module table); `served`: after
        the specialist's own post-processing (ui: strays pruned)."""
        if self.name == "ui":
            return _ui_ok(text.strip(), tools, prune=served)
        if self.name == "agent" and not tools:  # nothing to call: a plain answer, as chat's
            return _chat_ok(text.strip(), tools)
        return CHECKS[self.name](text.strip(), tools)

    def served(self, plan: Plan) -> tuple[Plan, int]:
        """The student request as the specialist serves it by default, and its budget: ui is constrained
        to the bounded A2UI grammar, with a budget its longest answer fits; the others as they are."""
        if self.name != "ui":
            return plan, MAX_NEW_TOKENS[self.name]
        from macaron.a2ui import a2ui_schema, max_output_bytes

        return replace(plan, json_schema=json.dumps(a2ui_schema())), max_output_bytes()


def _chat_ok(text: str, tools: Any) -> bool:
    return bool(text) and "```" not in text and "<tool_call>" not in text and not text.lstrip().startswith("{")


def _code_ok(text: str, tools: Any) -> bool:
    return bool(_FENCE.search(text))


def _agent_ok(text: str, tools: list[dict[str, Any]] | None) -> bool:
    from macaron.prompting.messages import ToolSpec
    from macaron.specialist.tool_parsers import get_parser

    specs = tuple(ToolSpec(name=t["function"]["name"], parameters=t["function"]["parameters"]) for t in tools or [])
    parsed = get_parser("hermes").parse(text, specs)
    return bool(parsed.calls) and all(call.name in {s.name for s in specs} for call in parsed.calls)


def _ui_ok(text: str, tools: Any, prune: bool = False) -> bool:
    from macaron.a2ui import validate_a2ui

    try:
        validate_a2ui(text, prune=prune)
    except ValueError:
        return False
    return True


CHECKS: dict[str, Callable[[str, Any], bool]] = {"chat": _chat_ok, "agent": _agent_ok, "code": _code_ok, "ui": _ui_ok}


SPECIALISTS = ("chat", "agent", "code", "ui")


def task(name: str, serving_prompt: str | None = None, without_tools_share: float = 0.0) -> SpecialistTask:
    """The task of specialist `name`; the serving prompt defaults to the configured profile's;
    `without_tools_share` (agent only) of its prompts are asked with no tools offered."""
    if name not in SPECIALISTS:
        raise KeyError(f"unknown specialist {name!r}; choose one of {', '.join(SPECIALISTS)}")
    if not 0.0 <= without_tools_share <= 1.0:
        raise ValueError(f"without_tools_share must lie in [0, 1]; got {without_tools_share}")
    if serving_prompt is None:
        from macaron.specialist.settings import SpecialistsSettings

        serving_prompt = SpecialistsSettings().profile(name).system_prompt
    share = without_tools_share if name == "agent" else 0.0
    return SpecialistTask(name=name, serving_prompt=serving_prompt, without_tools_share=share)
