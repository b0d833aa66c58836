"""The one prompt renderer and the protobuf → request conversion (no servers)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from macaron.prompting import ChatRequest, Message, RequestError, ToolCall, ToolChoice, ToolSpec
from macaron.prompting import combine_system, render, template_messages
from macaron.prompting.convert import request_from_proto
from macaron.specialist.profiles import load_profile
from macaron.specialist.settings import SpecialistsSettings
from macaron.v1 import common_pb2 as pb


@dataclass
class P:
    system_prompt: str = "PROFILE"
    tool_call_prefix: str = "<tool_call>\n"


def test_profile_prompt_comes_first_then_leading_system_messages() -> None:
    messages = (Message("system", "A"), Message("system", "B"), Message("user", "hi"), Message("system", "late"))
    assert combine_system("PROFILE", messages) == ("PROFILE\n\nA\n\nB", 2)
    assert combine_system("", messages) == ("A\n\nB", 2)
    rendered = template_messages(ChatRequest(messages=messages), P())
    assert [m["role"] for m in rendered] == ["system", "user", "system"]
    assert rendered[0]["content"] == "PROFILE\n\nA\n\nB" and rendered[2]["content"] == "late"


def test_no_system_text_means_no_system_turn() -> None:
    assert template_messages(ChatRequest(messages=(Message("user", "hi"),)), P(system_prompt="")) == [
        {"role": "user", "content": "hi"}
    ]


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model.model_dir))


WEATHER = ToolSpec("get_weather", "Weather", {"type": "object", "properties": {"city": {"type": "string"}}})


def test_render_tools_calls_and_results_with_the_chat_template(tokenizer) -> None:
    request = ChatRequest(
        messages=(
            Message("user", "Weather in Paris?"),
            Message("assistant", "", tool_calls=(ToolCall("call_1", "get_weather", '{"city": "Paris"}'),)),
            Message("tool", '{"temp": 21}', tool_call_id="call_1"),
        ),
        tools=(WEATHER,),
    )
    text = render(request, P(), tokenizer)
    assert text.startswith("<|im_start|>system\nPROFILE\n\n# Tools")
    assert json.dumps(WEATHER.openai_dict()) in text
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    assert "<tool_response>\n{\"temp\": 21}\n</tool_response>" in text
    assert text.endswith("<|im_start|>assistant\n")
    assert render(request, P(), tokenizer) == text  # deterministic: the router hashes this text


# The assistant tool-call loop of Qwen2.5's (and, with other markers, Llama 3.1's) chat template:
# `arguments` goes through `tojson` whatever its type, so a JSON string would be encoded twice.
TOJSON_TEMPLATE = """{%- for message in messages -%}
{{- '<|im_start|>' + message.role + '\n' + (message.content or '') -}}
{%- for tool_call in message.tool_calls or [] -%}
{%- if tool_call.function is defined -%}{%- set tool_call = tool_call.function -%}{%- endif -%}
{{- '<tool_call>\n{"name": "' + tool_call.name + '", "arguments": ' + (tool_call.arguments | tojson) + '}\n</tool_call>' -}}
{%- endfor -%}
{{- '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}"""


@pytest.mark.parametrize("template", ["the model's", "tojson always (Qwen2.5, Llama 3.1)"])
def test_earlier_tool_calls_reach_the_template_as_objects(tokenizer, template: str) -> None:
    import copy

    if template != "the model's":
        tokenizer = copy.copy(tokenizer)
        tokenizer.chat_template = TOJSON_TEMPLATE
    request = ChatRequest(messages=(
        Message("user", "Weather in Paris?"),
        Message("assistant", "", tool_calls=(ToolCall("call_1", "get_weather", '{"city":"Paris","days":[1,2]}'),)),
        Message("tool", "sunny", tool_call_id="call_1"),
        Message("user", "And tomorrow?"),
    ), tools=(WEATHER,))
    text = render(request, P(), tokenizer)
    assert '{"name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2]}}' in text
    assert '\\"city' not in text and '"{' not in text  # never a JSON string inside the JSON


def test_forced_call_appends_the_prefix_and_none_hides_tools(tokenizer) -> None:
    base = dict(messages=(Message("user", "hi"),), tools=(WEATHER,))
    forced = render(ChatRequest(**base, tool_choice=ToolChoice("required")), P(), tokenizer)
    assert forced.endswith("<|im_start|>assistant\n<tool_call>\n")
    hidden = render(ChatRequest(**base, tool_choice=ToolChoice("none")), P(), tokenizer)
    assert "# Tools" not in hidden


async def test_router_and_specialist_render_the_same_text(tokenizer) -> None:
    """The router's affinity hashes come from the prompt the specialist will send: each service's own
    path (the router's RoutingCore with its profiles, the specialist's Pipeline) over the wire format."""
    from macaron.config import MacaronSettings
    from macaron.discovery import StaticSource
    from macaron.router.prefix_index import block_hashes
    from macaron.router.server import RouterServer
    from macaron.specialist.server import build_pipelines
    from macaron.store import MemoryStore

    proto = pb.GenerateRequest(messages=[pb.ChatMessage(role=pb.ROLE_DEVELOPER, content="Be short."),
                                         pb.ChatMessage(role=pb.ROLE_USER, content="Fix my bug " * 40)])
    settings = MacaronSettings(router={"metrics": False})
    router = RouterServer(settings, store=MemoryStore(), classifier=None, tokenizer=tokenizer,
                          discovery=StaticSource(["http://127.0.0.1:9"]), host="127.0.0.1", port=0, serve_metrics=False)
    try:
        routed = router.core.prompt_blocks(request_from_proto(proto), "code")
    finally:
        await router.aclose()
    pipeline = build_pipelines(settings, ["code"], tokenizer)["code"]
    sent = pipeline.prompt_ids(request_from_proto(pb.GenerateRequest.FromString(proto.SerializeToString())))
    text = tokenizer.decode(sent, skip_special_tokens=False)
    assert "Be short." in text and SpecialistsSettings().code.system_prompt in text
    rs = settings.router
    expected = block_hashes(text, block_chars=rs.prefix_block_chars, seed=router.core.adapters["code"].seed,
                            max_blocks=rs.prefix_max_blocks)
    assert len(routed) >= 2 and list(routed) == expected
    chat = router.core.prompt_blocks(request_from_proto(proto), "chat")
    assert list(chat) != expected  # another specialist's prompt (and adapter) hashes differently


def test_conversion_keeps_meaning() -> None:
    proto = pb.GenerateRequest(
        messages=[pb.ChatMessage(role=pb.ROLE_DEVELOPER, content="sys"), pb.ChatMessage(role=pb.ROLE_USER, content="u")],
        tools=[pb.Tool(function=pb.FunctionDefinition(name="f", parameters_json='{"type": "object"}'))],
        tool_choice=pb.ToolChoice(function_name="f"),
    )
    request = request_from_proto(proto)
    assert request.messages[0] == Message("system", "sys")
    assert request.tool_choice == ToolChoice("function", "f") and request.tool_choice.forces_call
    assert request.response_format.type == "text" and not request.response_format_given


@pytest.mark.parametrize(
    "proto, words",
    [
        (pb.GenerateRequest(), "messages is empty"),
        (pb.GenerateRequest(messages=[pb.ChatMessage(role=9)]), "messages[0].role"),
        (pb.GenerateRequest(messages=[pb.ChatMessage(role=pb.ROLE_TOOL, content="x")]), "tool_call_id"),
        (pb.GenerateRequest(messages=[pb.ChatMessage(role=pb.ROLE_USER, tool_calls=[pb.ToolCall()])]), "only allowed on assistant"),
        (pb.GenerateRequest(messages=[pb.ChatMessage(role=pb.ROLE_USER)],
                            tools=[pb.Tool(function=pb.FunctionDefinition(name="f", parameters_json='{"type": "array"}'))]),
         "must describe an object"),
        (pb.GenerateRequest(messages=[pb.ChatMessage(role=pb.ROLE_USER)],
                            tools=[pb.Tool(function=pb.FunctionDefinition(name="f")),
                                   pb.Tool(function=pb.FunctionDefinition(name="f"))]), "unique"),
        (pb.GenerateRequest(messages=[pb.ChatMessage(role=pb.ROLE_USER)],
                            response_format=pb.ResponseFormat(type=pb.RESPONSE_FORMAT_TYPE_JSON_SCHEMA)), "needs a schema"),
        (pb.GenerateRequest(messages=[pb.ChatMessage(role=pb.ROLE_USER)],
                            tools=[pb.Tool(function=pb.FunctionDefinition(name="f"))],
                            tool_choice=pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_REQUIRED),
                            response_format=pb.ResponseFormat(type=pb.RESPONSE_FORMAT_TYPE_JSON_OBJECT)), "drop one"),
    ],
)
def test_conversion_errors_name_the_field(proto: pb.GenerateRequest, words: str) -> None:
    with pytest.raises(RequestError, match=None) as caught:
        request_from_proto(proto)
    assert words in str(caught.value)


def test_generated_package_has_no_namespace_init() -> None:
    services = Path(__file__).resolve().parents[2] / "services"
    assert not (services / "macaron" / "__init__.py").exists()
    assert (services / "macaron" / "v1" / "common_pb2.py").exists()
