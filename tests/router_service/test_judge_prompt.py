"""The judge's prompt: the newest user turn decides, earlier user turns give it its conversation."""

from __future__ import annotations

from macaron.prompting.messages import ChatRequest, Message, ToolSpec
from macaron.router.judge import JUDGE_SYSTEM, judge_prompt_messages


def _chat(*turns: tuple[str, str], tools: tuple[str, ...] = ()) -> ChatRequest:
    return ChatRequest(messages=tuple(Message(role=r, content=c) for r, c in turns),
                       tools=tuple(ToolSpec(name=n) for n in tools))


def test_single_turn_is_the_turn_itself() -> None:
    messages = judge_prompt_messages(_chat(("system", "be brief"), ("user", "write a haiku")), 1500)
    assert messages == [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": "write a haiku"}]


def test_earlier_user_turns_come_before_the_newest_one() -> None:
    chat = _chat(("user", "write a bash script that renames files"), ("assistant", "for f in *; do ...; done"),
                 ("user", "fix the regex in it"), ("assistant", "done"), ("user", "now make it shorter"),
                 tools=("run_shell",))
    text = judge_prompt_messages(chat, 1500, history_turns=2)[1]["content"]
    assert text.index("renames files") < text.index("fix the regex") < text.index("now make it shorter")
    assert "for f in" not in text  # assistant turns are not shown
    assert text.endswith("(tools offered: run_shell)")
    one = judge_prompt_messages(chat, 1500, history_turns=1)[1]["content"]
    assert "renames files" not in one and "fix the regex" in one
    alone = judge_prompt_messages(chat, 1500, history_turns=0)[1]["content"]
    assert alone == "now make it shorter\n\n(tools offered: run_shell)"


def test_turns_are_cut() -> None:
    chat = _chat(("user", "a" * 5000), ("user", "b" * 5000))
    text = judge_prompt_messages(chat, 1000, history_turns=2)[1]["content"]
    assert text.count("a" * 200) == 1 and "a" * 201 not in text and "b" * 1000 in text and "b" * 1001 not in text
