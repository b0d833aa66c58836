"""Streaming never shows a stop sequence that the final text then drops: the hold-back of partial
stop strings and partial stop_regex matches, token by token, then through the async engine."""

from __future__ import annotations

import pytest

from macaron.engine import AsyncLLMEngine, GenerateRequest
from macaron.engine.detokenizer import IncrementalDetokenizer

from .helpers import PROMPTS, greedy


class CharTokenizer:
    """One token per character: every prefix of the text is a possible streamed chunk."""

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(i) for i in ids)


@pytest.mark.parametrize(
    "text, stop, stop_regex, final",
    [
        ("say hello 123 world", [], [r"\d+ w"], "say hello "),
        ("say hello 123 world", [], [r"[0-9]{3}\s"], "say hello "),
        ("abcabd then more", ["abd"], [], "abc"),
        ("no stop here at all", ["zz"], [r"q\d"], None),
    ],
)
def test_streamed_prefixes_never_contain_the_stop(text, stop, stop_regex, final):
    detok = IncrementalDetokenizer(CharTokenizer(), stop=stop, stop_regex=stop_regex)
    ids: list[int] = []
    streamed: list[str] = []
    result = None
    for ch in text:
        ids.append(ord(ch))
        new = detok.update(ids)
        hit = detok.find_stop(len(new))
        if hit is not None:
            result = detok.text[: hit[0]]
            break
        streamed.append(detok.text[: detok.visible_length()])
    if final is None:
        assert result is None and streamed[-1] == text  # nothing to hold back: all of it streams
    else:
        assert result == final
        assert all(final.startswith(s) for s in streamed), streamed
        assert streamed[-1] == final  # and everything before the stop did stream


async def test_async_stream_with_stop_regex_is_never_retracted(engine):
    aeng = AsyncLLMEngine(engine)
    await aeng.start()
    try:
        base = await aeng.generate(GenerateRequest(rid="b", prompt=PROMPTS[1], sampling=greedy(24, ignore_eos=True)))
        text = base.text
        piece = text[8:12]
        pattern = "".join(f"[{c}]" if c.isalnum() else f"\\{c}" if not c.isspace() else r"\s" for c in piece)
        req = GenerateRequest(
            rid="r", prompt=PROMPTS[1], sampling=greedy(24, ignore_eos=True, stop_regex=pattern), stream=True
        )
        outs = [o async for o in aeng.submit(req)]
        final = outs[-1]
        assert final.finish_reason["type"] == "stop"
        assert final.text == text[: text.index(piece)]
        assert all(final.text.startswith(o.text) for o in outs), [o.text for o in outs]
    finally:
        await aeng.shutdown()
