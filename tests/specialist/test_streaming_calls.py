"""Tool calls, parallel_tool_calls and logprobs through an in-process pipeline on the real engine.

The tiny model's weights are random, so it never writes a tool call on its own: the forced call
(constrained decoding) shows the streamed deltas, and the engine is shown stopping generation at
the stop string the pipeline adds for `parallel_tool_calls: false` by forcing two calls with a
regex (the same stop works on SGLang, whose stop strings these are).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import jsonschema

from macaron.discovery import StaticSource
from macaron.engine_client import AsyncEngineClient
from macaron.prompting import ChatRequest, Message, ToolChoice, ToolSpec
from macaron.specialist.events import Done, Logprobs, TextDelta, ToolCallDeltas
from macaron.specialist.generation import EnginePool, Pipeline
from macaron.specialist.profiles import load_profile
from macaron.specialist.replicas import ReplicaPicker
from macaron.specialist.sampling import SamplingRequest
from macaron.specialist.settings import SpecialistsSettings

from .helpers import TOOL_SCHEMAS

TOOLS = tuple(ToolSpec(name, f"{name} tool", schema) for name, schema in TOOL_SCHEMAS.items())
CALL = '<tool_call>\n\\{"name": "get_weather", "arguments": \\{"city": "(Paris|Oslo)"\\}\\}\n</tool_call>\n'


class RecordingPool(EnginePool):
    """The real engine client, with every generate_stream's sampling_params and extra body kept."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[dict[str, Any]] = []

    def client(self, url: str) -> AsyncEngineClient:
        real = super().client(url)
        pool = self

        class Recording:
            def __getattr__(self, name: str) -> Any:
                return getattr(real, name)

            def generate_stream(self, **kwargs: Any) -> Any:
                pool.sent.append({"sampling_params": kwargs["sampling_params"], **(kwargs.get("extra_body") or {})})
                return real.generate_stream(**kwargs)

        return Recording()  # type: ignore[return-value]


def _run(engine_url: str, tokenizer: Any, request: ChatRequest, sampling: SamplingRequest, **kw: Any
         ) -> tuple[list[Any], list[dict[str, Any]]]:
    async def main() -> tuple[list[Any], list[dict[str, Any]]]:
        settings = SpecialistsSettings()
        pool = RecordingPool()
        pipeline = Pipeline(load_profile(settings, "agent"), settings, tokenizer,
                            ReplicaPicker(StaticSource([engine_url])), pool)
        try:
            events = [e async for e in pipeline.run(request, sampling, request_id="t", **kw)]
        finally:
            await pool.aclose()
        return events, pool.sent

    return asyncio.run(asyncio.wait_for(main(), 60))


def test_a_forced_call_streams_name_first_then_argument_fragments(engine_url: str, tokenizer: Any) -> None:
    request = ChatRequest(messages=(Message("user", "Weather?"),), tools=TOOLS, tool_choice=ToolChoice("function", "get_weather"))
    events, _ = _run(engine_url, tokenizer, request, SamplingRequest(max_new_tokens=200, temperature=0.0))
    deltas = [d for e in events if isinstance(e, ToolCallDeltas) for d in e.deltas]
    first, rest = deltas[0], deltas[1:]
    assert first.index == 0 and first.id.startswith("call_") and first.name == "get_weather" and first.arguments == ""
    assert len(rest) > 3 and all(d.index == 0 and not d.id and not d.name for d in rest)  # fragments as generated
    jsonschema.validate(json.loads("".join(d.arguments for d in rest)), TOOL_SCHEMAS["get_weather"])
    assert not any(isinstance(e, TextDelta) for e in events)
    assert events[-1].finish.reason == "tool_calls"


def test_parallel_tool_calls_false_adds_the_end_tag_as_a_stop(engine_url: str, tokenizer: Any) -> None:
    hi = (Message("user", "Weather in Paris and Oslo?"),)
    sampling = SamplingRequest(max_new_tokens=8, temperature=0.0)
    _, sent = _run(engine_url, tokenizer, ChatRequest(messages=hi, tools=TOOLS, parallel_tool_calls=False), sampling)
    assert sent[-1]["sampling_params"]["stop"] == ["</tool_call>"]
    _, sent = _run(engine_url, tokenizer, ChatRequest(messages=hi, tools=TOOLS), sampling)
    assert "stop" not in sent[-1]["sampling_params"]
    caller = SamplingRequest(max_new_tokens=8, temperature=0.0, stop=("</tool_call>",))
    _, sent = _run(engine_url, tokenizer, ChatRequest(messages=hi, tools=TOOLS, parallel_tool_calls=False), caller)
    assert sent[-1]["sampling_params"]["stop"] == ["</tool_call>"]  # the caller's own, not twice


def test_the_engine_stops_at_the_first_call_end_while_generating(engine_url: str) -> None:
    """Two calls forced by a regex: with the stop, generation ends after the first (fewer tokens), not trimmed later."""
    def generate(stop: list[str] | None) -> dict[str, Any]:
        params: dict[str, Any] = {"max_new_tokens": 120, "temperature": 0.0, "regex": CALL + CALL}
        if stop:
            params["stop"] = stop
        response = httpx.post(engine_url + "/generate", json={"text": "Weather?", "sampling_params": params}, timeout=60)
        assert response.status_code == 200, response.text
        return response.json()

    both, one = generate(None), generate(["</tool_call>"])
    assert both["text"].count("<tool_call>") == 2
    assert one["text"].count("<tool_call>") == 1 and "</tool_call>" not in one["text"]
    assert one["meta_info"]["finish_reason"] == {"type": "stop", "matched": "</tool_call>"}
    assert one["meta_info"]["completion_tokens"] < both["meta_info"]["completion_tokens"] / 2 + 3


def test_logprobs_come_per_token_with_exact_bytes(engine_url: str, tokenizer: Any) -> None:
    request = ChatRequest(messages=(Message("user", "Hello there"),))
    events, sent = _run(engine_url, tokenizer, request, SamplingRequest(max_new_tokens=10, temperature=0.0), logprobs=3)
    assert sent[-1]["return_logprob"] is True and sent[-1]["top_logprobs_num"] == 3
    tokens = [t for e in events if isinstance(e, Logprobs) for t in e.tokens]
    done = events[-1]
    assert isinstance(done, Done) and len(tokens) == done.usage.completion_tokens == 10
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert b"".join(t.bytes for t in tokens).decode("utf-8", errors="replace").startswith(text)
    for t in tokens:
        assert len(t.top_logprobs) == 3 and t.top_logprobs[0].bytes == t.bytes  # greedy: the best one was chosen
        assert t.logprob == t.top_logprobs[0].logprob <= 0
