"""Post-processing and plumbing without servers: tool-call parsing, the UI schema, sampling, finish
reasons, discovery and replica choice, and the pipeline's answer when no engine listens."""

from __future__ import annotations

import asyncio
import json
import math

import jsonschema
import pytest

from macaron.discovery import DiscoveryError, DiscoverySettings, DnsSource, StaticSource, build_source, normalize_url
from macaron.prompting import ChatRequest, Message, ToolChoice, ToolSpec
from macaron.specialist import finish as finish_mod
from macaron.specialist.errors import BadRequestError, ContextOverflowError, UnavailableError
from macaron.specialist.generation import Pipeline
from macaron.specialist.profiles import load_profile, plan_output
from macaron.specialist.replicas import ReplicaPicker
from macaron.specialist.sampling import SamplingRequest, resolve_sampling
from macaron.specialist.settings import SpecialistsSettings
from macaron.specialist.tool_parsers import HermesParser, get_parser, parser_names, register_parser
from macaron.specialist.ui_schema import UIValidationError, max_output_bytes, ui_schema, validate_ui
from macaron.specialist.wire import finish_from_proto, finish_to_proto
from macaron.v1 import common_pb2 as pb

WEATHER = ToolSpec("get_weather", "", {"type": "object", "properties": {"city": {"type": "string"}},
                                      "required": ["city"], "additionalProperties": False})


# --- tool calls ---------------------------------------------------------------------------


def test_hermes_parses_calls_and_keeps_invalid_blocks_as_text() -> None:
    parser = HermesParser()
    text = 'Sure.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    out = parser.parse(text + '<tool_call>{"name": "nope", "arguments": {}}</tool_call>', (WEATHER,))
    assert [(c.name, json.loads(c.arguments)) for c in out.calls] == [("get_weather", {"city": "Paris"})]
    assert out.content == 'Sure.<tool_call>{"name": "nope", "arguments": {}}</tool_call>'
    bad_args = '<tool_call>{"name": "get_weather", "arguments": {"town": 1}}</tool_call>'
    assert parser.parse(bad_args, (WEATHER,)).calls == ()
    assert parser.parse("no calls here", (WEATHER,)).content == "no calls here"


def test_hermes_streams_only_what_cannot_be_a_call() -> None:
    from macaron.specialist.events import TextDelta
    from macaron.specialist.tool_stream import CallStreamer

    def content(*steps: str) -> list[str]:
        streamer = CallStreamer(HermesParser.start, HermesParser.end, (WEATHER,))
        return [e.text for text in steps for e in streamer.feed(text) if isinstance(e, TextDelta)]

    assert content("Hello <tool") == ["Hello "]  # the tail could still become the start tag
    assert content("Hello <tool", "Hello <toolbox") == ["Hello ", "<toolbox"]
    assert content("Hi <tool_call>{") == ["Hi "]


def test_forced_schema_and_parse() -> None:
    email = ToolSpec("send_email", "", {"type": "object", "properties": {"to": {"type": "string"}}})
    parser = HermesParser()
    schema = parser.forced_call_schema((WEATHER, email))
    assert [v["properties"]["name"]["const"] for v in schema["anyOf"]] == ["get_weather", "send_email"]
    jsonschema.validate({"name": "send_email", "arguments": {"to": "x"}}, schema)
    call = parser.parse_forced('{"name": "get_weather", "arguments": {"city": "Oslo"}}', (WEATHER,))
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Oslo"}
    with pytest.raises(ValueError, match="fail its schema"):
        parser.parse_forced('{"name": "get_weather", "arguments": {}}', (WEATHER,))


def _streamed(streamer, text: str, cut: bool, step: int = 1) -> list:
    events = []
    for i in range(step, len(text) + step, step):
        events += streamer.feed(text[:i])
    return events + streamer.finish(text, cut=cut)


def _calls(events) -> list[dict[str, str]]:
    """OpenAI's accumulation: deltas merged by index (the openai client does the same)."""
    from macaron.specialist.events import ToolCallDeltas

    calls: dict[int, dict[str, str]] = {}
    for e in events:
        for d in (e.deltas if isinstance(e, ToolCallDeltas) else ()):
            call = calls.setdefault(d.index, {"id": "", "name": "", "arguments": ""})
            call["id"] = call["id"] or d.id
            call["name"] = call["name"] or d.name
            call["arguments"] += d.arguments
    return [calls[i] for i in sorted(calls)]


def test_tool_calls_stream_as_openai_deltas() -> None:
    """Name first (with id, arguments ""), then argument fragments as generated; no tag or outer brace leaks."""
    from macaron.specialist.events import TextDelta, ToolCallDeltas
    from macaron.specialist.tool_stream import CallStreamer

    text = ('Sure.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa}ris {", "n": [1, {"a": "\\""}]}}'
            '\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
            '<tool_call>{"name": "nope", "arguments": {}}</tool_call>')
    events = _streamed(CallStreamer("<tool_call>", "</tool_call>", (WEATHER,)), text, cut=False)
    deltas = [d for e in events if isinstance(e, ToolCallDeltas) for d in e.deltas]
    first = deltas[0]
    assert (first.index, first.name, first.arguments) == (0, "get_weather", "") and first.id.startswith("call_")
    assert len([d for d in deltas if d.index == 0]) > 10  # fragments while generated, not one piece at the end
    calls = _calls(events)
    assert [json.loads(c["arguments"]) for c in calls] == [{"city": "Pa}ris {", "n": [1, {"a": '"'}]}, {"city": "Oslo"}]
    assert len({c["id"] for c in calls}) == 2
    content = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert content.startswith("Sure.") and '"nope"' in content and "get_weather" not in content


def test_structured_answers_cut_by_max_tokens_give_what_fit() -> None:
    """As OpenAI: a forced call or UI description that hit max_tokens is answered, partial, with finish length."""
    from macaron.specialist.events import TextDelta
    from macaron.specialist.finish import Finish
    from macaron.specialist.postprocess import finish_output
    from macaron.specialist.tool_stream import CallStreamer

    settings = SpecialistsSettings()
    ui = load_profile(settings, "ui")
    email = ToolSpec("send_email", "", {"type": "object"})
    cut = Finish("length", length=8)

    def forced(text: str, *tools: ToolSpec) -> list[dict[str, str]]:
        return _calls(_streamed(CallStreamer("<tool_call>", "</tool_call>", tools, in_call=True), text, cut=True, step=3))

    (call,) = forced('{"name": "get_weather", "arguments": {"city": "Pa', WEATHER)
    assert call["name"] == "get_weather" and call["arguments"] == '{"city": "Pa' and call["id"].startswith("call_")
    (early,) = forced('{"na', WEATHER)
    assert early["name"] == "get_weather" and early["arguments"] == ""  # the forced function's name
    (unnamed,) = forced('{"na', WEATHER, email)
    assert unnamed["name"] == ""  # two functions it could be: none is made up
    request = ChatRequest(messages=(Message("user", "weather?"),))
    (text,) = finish_output('{"type": "card", "chi', cut, request, plan_output(request, ui), ui, 8)
    assert isinstance(text, TextDelta) and text.text == '{"type": "card", "chi'


def test_parser_registry_is_pluggable() -> None:
    class Loud(HermesParser):
        name = "loud"

    register_parser("loud", Loud)
    assert "loud" in parser_names() and get_parser("loud").name == "loud"
    with pytest.raises(KeyError, match="registered"):
        get_parser("missing")


def test_output_plan_precedence() -> None:
    settings = SpecialistsSettings()
    ui, chat = load_profile(settings, "ui"), load_profile(settings, "chat")
    hi = (Message("user", "hi"),)
    assert plan_output(ChatRequest(messages=hi), ui).mode == "a2ui"
    assert plan_output(ChatRequest(messages=hi), chat).mode == "text"
    assert plan_output(ChatRequest(messages=hi, tools=(WEATHER,)), chat).mode == "tools"
    forced = ChatRequest(messages=hi, tools=(WEATHER,), tool_choice=ToolChoice("function", "get_weather"))
    assert plan_output(forced, ui).mode == "forced_tool"
    no_tools = SpecialistsSettings(code={"tool_call_parser": None})
    with pytest.raises(BadRequestError, match="does not take tools"):
        plan_output(ChatRequest(messages=hi, tools=(WEATHER,)), load_profile(no_tools, "code"))


# --- UI schema ----------------------------------------------------------------------------


def _largest(node: dict, root: dict) -> object:
    """The longest instance of our bounded schema subset (every optional field, every item, longest strings)."""
    if "$ref" in node:
        return _largest(root["$defs"][node["$ref"].split("/")[-1]], root)
    if "enum" in node:
        return max(node["enum"], key=lambda v: len(json.dumps(v)))
    if node["type"] == "object":
        return {k: _largest(v, root) for k, v in node["properties"].items()}
    if node["type"] == "array":
        return [_largest(node["items"], root)] * node["maxItems"]
    width = 32 if "{0,32}" in node["pattern"] else 16
    return "\uffff" * width if "\\uffff" in node["pattern"] else "a" * width


def test_ui_schema_is_bounded_and_its_bound_is_tight() -> None:
    schema = ui_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    largest = _largest(schema, schema)
    jsonschema.validate(largest, schema)
    assert len(json.dumps(largest, ensure_ascii=False).encode()) == max_output_bytes()
    assert max_output_bytes() < 4096  # the default ui budget always completes a description


def test_ui_validation() -> None:
    assert validate_ui('{"root": {"type": "text", "props": {"text": "Hallo, Wélt 日本"}}}')["root"]["type"] == "text"
    for bad in ('{"root": {"type": "blink"}}', '{"root": {"type": "text", "children": []', "[]",
                '{"root": {"type": "row", "children": [{"type": "row", "children": [{"type": "row", "children": []}]}]}}'):
        with pytest.raises(UIValidationError):
            validate_ui(bad)


# --- sampling, finish -------------------------------------------------------------------


def test_sampling_defaults_caps_and_context() -> None:
    chat = SpecialistsSettings().chat
    params = resolve_sampling(SamplingRequest(), chat, prompt_tokens=100, context_length=2048)
    assert params == {"max_new_tokens": 512, "temperature": 0.7, "top_p": 0.95, "top_k": -1, "repetition_penalty": 1.15}
    # the profile's penalty is a default: the request's own value wins, and profiles without one send none
    assert resolve_sampling(SamplingRequest(repetition_penalty=1.0), chat, prompt_tokens=1, context_length=2048)[
        "repetition_penalty"] == 1.0
    code = SpecialistsSettings().code
    assert "repetition_penalty" not in resolve_sampling(SamplingRequest(), code, prompt_tokens=1, context_length=2048)
    fitted = resolve_sampling(SamplingRequest(seed=3, stop=("x",)), chat, prompt_tokens=2000, context_length=2048)
    assert fitted["max_new_tokens"] == 48 and fitted["sampling_seed"] == 3 and fitted["stop"] == ["x"]
    with pytest.raises(ContextOverflowError, match="context limit of 2048"):
        resolve_sampling(SamplingRequest(max_new_tokens=100), chat, prompt_tokens=2000, context_length=2048)
    with pytest.raises(ContextOverflowError):
        resolve_sampling(SamplingRequest(), chat, prompt_tokens=2048, context_length=2048)
    for bad in (SamplingRequest(temperature=math.inf), SamplingRequest(top_p=0), SamplingRequest(min_p=2),
                SamplingRequest(repetition_penalty=0), SamplingRequest(stop=("",)), SamplingRequest(max_new_tokens=5000),
                SamplingRequest(min_new_tokens=600)):
        with pytest.raises(BadRequestError, match="sampling"):
            resolve_sampling(bad, chat, prompt_tokens=10, context_length=2048)


def test_finish_reasons_map_both_ways() -> None:
    cases = {
        "stop": {"type": "stop", "matched": 2},
        "length": {"type": "length", "length": 16},
        "abort": {"type": "abort", "message": "bye"},
    }
    for kind, sglang in cases.items():
        finish = finish_mod.from_sglang(sglang)
        assert finish.reason == kind and finish_mod.to_sglang(finish) == sglang
        assert finish_from_proto(finish_to_proto(finish)) == finish
    calls = finish_mod.from_sglang({"type": "stop", "matched": "</s>"}, tool_calls=True)
    assert calls.openai == "tool_calls" and finish_to_proto(calls).reason == pb.FINISH_REASON_TOOL_CALLS
    assert finish_to_proto(calls).matched_text == "</s>"


# --- discovery and replicas ---------------------------------------------------------------


def test_discovery_sources() -> None:
    assert normalize_url("HTTP://Engine:30000/") == "http://engine:30000"
    assert normalize_url("https://[::1]") == "https://[::1]:443"
    with pytest.raises(ValueError):
        normalize_url("ftp://x")
    assert asyncio.run(StaticSource(["http://b:1", "http://a:1/", "http://b:1"]).replicas()) == ("http://a:1", "http://b:1")
    assert asyncio.run(DnsSource("localhost", 30000).replicas())[0].endswith(":30000")
    with pytest.raises(DiscoveryError):
        asyncio.run(DnsSource("no-such-host.invalid", 1).replicas())
    assert isinstance(build_source(DiscoverySettings(), "http://127.0.0.1:30000"), StaticSource)
    with pytest.raises(DiscoveryError, match="dns_name"):
        build_source(DiscoverySettings(mode="dns"), "http://x:1")


def test_picker_obeys_only_its_own_replicas_and_balances() -> None:
    async def main() -> None:
        picker = ReplicaPicker(StaticSource(["http://a:1", "http://b:1"]))
        assert await picker.pick("http://B:1/") == "http://b:1"
        with pytest.raises(BadRequestError, match="not one of"):
            await picker.pick("http://evil:1")
        with picker.track("http://a:1"):
            assert {await picker.pick() for _ in range(4)} == {"http://b:1"}
        picker.mark_down("http://b:1")
        assert await picker.pick() == "http://a:1"
        with pytest.raises(UnavailableError):
            await picker.pick(exclude=frozenset({"http://a:1", "http://b:1"}))

    asyncio.run(main())


class _FakeTokenizer:
    model_max_length = 2048

    def apply_chat_template(self, conversation, **kwargs) -> str:  # type: ignore[no-untyped-def]
        return "".join(m["content"] for m in conversation)

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        return {"input_ids": list(range(len(text.split())))}


def test_pipeline_without_a_live_engine_is_unavailable() -> None:
    from engine_api.servers import free_port

    async def main() -> None:
        settings = SpecialistsSettings(chat={"context_length": 256})
        picker = ReplicaPicker(StaticSource([f"http://127.0.0.1:{free_port()}"]))
        pipeline = Pipeline(load_profile(settings, "chat"), settings, _FakeTokenizer(), picker)
        with pytest.raises(UnavailableError):
            async for _ in pipeline.run(ChatRequest(messages=(Message("user", "hi"),)), SamplingRequest(), request_id="r"):
                pass
        await pipeline.engines.aclose()

    asyncio.run(asyncio.wait_for(main(), 20))


def test_token_bytes_join_to_the_exact_text(tokenizer) -> None:
    """Byte-level BPE: a character split over tokens is exact in the joined bytes, replaced in each token's text."""
    from macaron.specialist.logprobs import TokenBytes

    text = "ok 😀 日本語 é! <|im_end|>"
    ids = tokenizer.encode(text, add_special_tokens=False)
    token_bytes = TokenBytes(tokenizer)
    pieces = [token_bytes(i) for i in ids]
    assert b"".join(raw for _, raw in pieces) == text.encode()
    assert all(token == raw.decode("utf-8", errors="replace") for token, raw in pieces)
    assert any("\ufffd" in token for token, _ in pieces)  # the emoji spans tokens
