"""The tokenizer round-trips any UTF-8, and the chat template renders every message kind."""

from __future__ import annotations

import pytest

from macaron.assets import ModelAssets
from macaron.assets.corpus import TOOLS

ROUND_TRIP = [
    "plain ASCII text.",
    "emoji 😀🎉 and a family 👩‍👩‍👧‍👦 and a flag 🇫🇷 and skin tone 👍🏽",
    "中文，日本語のテキスト，한국어 텍스트",
    "control \x00\x01\x02\x07\x1b[31mred\x1b[0m\x7f and \u2028 line sep and \ufeff BOM",
    "  leading and trailing spaces  \t\t\n\n\r\n",
    "combining e\u0301 and lone \u0301 marks, zero width \u200b joiner \u200d",
    "rare script: 𓀀 𐍈 ᚠᛇᚻ and math 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    '{"name": "get_weather", "arguments": {"city": "Zürich"}}',
    "def f(x):\n\treturn x  # comment\n",
    "a" * 300,
    "",
]


@pytest.fixture(scope="module")
def tokenizer(tiny_assets: ModelAssets):  # type: ignore[no-untyped-def]
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_assets.model_dir))


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_round_trip(tokenizer, text: str) -> None:  # type: ignore[no-untyped-def]
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text
    assert all(0 <= i < len(tokenizer) for i in ids)


def test_special_and_markup_tokens(tokenizer) -> None:  # type: ignore[no-untyped-def]
    assert tokenizer.eos_token == tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.bos_token is None
    for token in ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>",
                  "<tool_response>", "</tool_response>"):
        ids = tokenizer.encode(token, add_special_tokens=False)
        assert len(ids) == 1, token
    text = "<|im_start|>assistant\n<tool_call>\n{}\n</tool_call><|im_end|>"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text
    # Tool-call markup survives skip_special_tokens, the turn markers do not.
    assert tokenizer.decode(ids, skip_special_tokens=True) == "assistant\n<tool_call>\n{}\n</tool_call>"


def test_vocab_matches_model(tokenizer, tiny_assets: ModelAssets) -> None:  # type: ignore[no-untyped-def]
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(tiny_assets.model_dir))
    assert config.vocab_size == len(tokenizer)
    assert config.eos_token_id == tokenizer.eos_token_id


EXPECTED_CONVERSATION = (
    "<|im_start|>system\nBe brief.<|im_end|>\n"
    "<|im_start|>user\nWeather in Paris and Rome?<|im_end|>\n"
    "<|im_start|>assistant\nLet me check.\n"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome", "unit": "celsius"}}\n</tool_call>'
    "<|im_end|>\n"
    "<|im_start|>user\n<tool_response>\n18°C\n</tool_response>\n<tool_response>\n25°C\n</tool_response>"
    "<|im_end|>\n"
    "<|im_start|>assistant\nParis 18°C, Rome 25°C.<|im_end|>\n"
    "<|im_start|>user\nThanks!<|im_end|>\n"
    "<|im_start|>assistant\n"
)


def _conversation() -> list[dict]:
    return [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [
                {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                # OpenAI clients send arguments as a JSON string; it is written as is.
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Rome", "unit": "celsius"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18°C"},
        {"role": "tool", "tool_call_id": "call_2", "content": "25°C"},
        {"role": "assistant", "content": [{"type": "text", "text": "Paris 18°C, Rome 25°C."}]},
        {"role": "user", "content": "Thanks!"},
    ]


def test_chat_template_renders_every_message_kind(tokenizer) -> None:  # type: ignore[no-untyped-def]
    text = tokenizer.apply_chat_template(_conversation(), add_generation_prompt=True, tokenize=False)
    assert text == EXPECTED_CONVERSATION


def test_chat_template_renders_tools(tokenizer) -> None:  # type: ignore[no-untyped-def]
    text = tokenizer.apply_chat_template(_conversation(), tools=TOOLS, add_generation_prompt=True, tokenize=False)
    system, rest = text.split("<|im_end|>\n", 1)
    assert system.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n\n")
    assert "<tools>\n" in system and "\n</tools>" in system
    assert '{"type": "function", "function": {"name": "get_weather"' in system
    assert '"name": "send_email"' in system
    assert system.endswith('<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')
    assert rest == EXPECTED_CONVERSATION.split("<|im_end|>\n", 1)[1]  # the system turn is replaced, not repeated


def test_chat_template_without_system_and_without_generation_prompt(tokenizer) -> None:  # type: ignore[no-untyped-def]
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert tokenizer.apply_chat_template(messages, tokenize=False) == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n"
    )
    with_tools = tokenizer.apply_chat_template(messages[:1], tools=TOOLS, tokenize=False)
    assert with_tools.startswith("<|im_start|>system\n# Tools\n\n")
    ids = tokenizer.apply_chat_template(messages[:1], add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    im_start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert ids[0] == im_start and ids.count(im_start) == 2
