"""POST /v1/completions over the fake router: OpenAI's legacy shape with the official client,
prompt lists, echo, streams, legacy logprobs, and 400s for what cannot be honoured."""

from __future__ import annotations

import httpx
import openai
import pytest

from engine_api.servers import ThreadedServer
from sdk.fake_router import FakeRouterServer

from .test_gateway import oai


def test_plain_prompt_reaches_the_router_as_a_prompt(dev_gateway: ThreadedServer, fake: FakeRouterServer) -> None:
    raw = oai(dev_gateway).completions.with_raw_response.create(model="macaron-code", prompt="def add(a, b):",
                                                                  temperature=0, extra_body={"top_k": 5})
    completion = raw.parse()
    sent = fake.servicer.calls[-1].request
    assert sent.HasField("prompt") and sent.prompt == "def add(a, b):" and not sent.messages
    assert sent.sampling.max_new_tokens == 16 and sent.sampling.top_k == 5  # OpenAI's default max_tokens
    assert completion.object == "text_completion" and completion.id.startswith("cmpl-")
    (choice,) = completion.choices
    assert (choice.index, choice.text, choice.finish_reason, choice.logprobs) == (0, "Hello world", "stop", None)
    assert completion.usage.total_tokens == 14 and completion.model == "macaron-code"
    assert raw.headers["x-macaron-specialist"] == "code"


def test_a_list_of_prompts_gives_one_choice_each_in_order(dev_gateway: ThreadedServer, fake: FakeRouterServer) -> None:
    completion = oai(dev_gateway).completions.create(model="macaron-auto", prompt=["one", "two", "three"], echo=True)
    assert [c.index for c in completion.choices] == [0, 1, 2]
    assert [c.text for c in completion.choices] == ["oneHello world", "twoHello world", "threeHello world"]
    assert sorted(c.request.prompt for c in fake.servicer.calls) == ["one", "three", "two"]
    assert len({c.request.request_id for c in fake.servicer.calls}) == 3
    assert completion.usage.prompt_tokens == 36 and completion.usage.completion_tokens == 6  # summed


def test_stream_interleaves_prompts_by_index_with_usage(dev_gateway: ThreadedServer) -> None:
    chunks = list(oai(dev_gateway).completions.create(model="macaron-chat", prompt=["a", "b"], stream=True,
                                                      stream_options={"include_usage": True}))
    texts: dict[int, str] = {0: "", 1: ""}
    finishes = {}
    for chunk in chunks[:-1]:
        (choice,) = chunk.choices
        texts[choice.index] += choice.text
        if choice.finish_reason:
            finishes[choice.index] = choice.finish_reason
    assert texts == {0: "Hello world", 1: "Hello world"} and finishes == {0: "stop", 1: "stop"}
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 4


def test_legacy_logprobs_whole_and_streamed(dev_gateway: ThreadedServer, fake: FakeRouterServer) -> None:
    client = oai(dev_gateway)
    completion = client.completions.create(model="macaron-chat", prompt="hi", logprobs=2)
    sent = fake.servicer.calls[-1].request
    assert sent.logprobs and sent.top_logprobs == 2
    lp = completion.choices[0].logprobs
    assert lp.tokens == ["Hello", " world"] and lp.token_logprobs == [-0.5, -1.5]
    assert lp.text_offset == [0, 5] and lp.top_logprobs == [{"Hello": -0.5, "alt1": -1.5}, {" world": -1.5, "alt1": -2.5}]
    none = client.completions.create(model="macaron-chat", prompt="hi", logprobs=0).choices[0].logprobs
    assert none.tokens == ["Hello", " world"] and none.top_logprobs is None
    streamed = [c.choices[0] for c in client.completions.create(model="macaron-chat", prompt="hi", logprobs=1, stream=True)]
    with_text = [c for c in streamed if c.text]
    assert [(c.text, c.logprobs.tokens, c.logprobs.text_offset) for c in with_text] == [
        ("Hello", ["Hello"], [0]), (" world", [" world"], [5])]


@pytest.mark.parametrize(("extra", "param"), [
    ({"prompt": ""}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"prompt": [1, 2, 3]}, "prompt"),
    ({"prompt": ["x"] * 33}, "prompt"),
    ({"prompt": "x", "n": 2}, "n"),
    ({"prompt": "x", "best_of": 3}, "best_of"),
    ({"prompt": "x", "suffix": "end"}, "suffix"),
    ({"prompt": "x", "echo": True, "logprobs": 1}, "echo"),
    ({"prompt": "x", "logprobs": 6}, "logprobs"),
    ({"prompt": "x", "max_tokens": 2**31}, "max_tokens"),
    ({"prompt": "x", "logit_bias": {"1": 2}}, "logit_bias"),
    ({"prompt": "x", "stream_options": {"include_usage": True}}, "stream_options"),
    ({"prompt": "x", "model": "gpt-3.5-turbo-instruct"}, "model"),
    ({"prompt": "x", "bogus": 1}, "bogus"),
    ({}, "prompt"),
])
def test_bad_completions_are_400_in_openai_shape(dev_gateway: ThreadedServer, extra: dict, param: str) -> None:
    response = httpx.post(dev_gateway.url + "/v1/completions", json={"model": "macaron-auto", **extra}, timeout=20.0)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param, error
    assert response.headers["x-request-id"]


def test_router_errors_keep_their_status(dev_gateway: ThreadedServer) -> None:
    with pytest.raises(openai.RateLimitError):
        oai(dev_gateway).completions.create(model="macaron-chat", prompt=["fine", "fail:RESOURCE_EXHAUSTED"])
    with pytest.raises(openai.BadRequestError):
        oai(dev_gateway).completions.create(model="macaron-chat", prompt="fail:INVALID_ARGUMENT", stream=True)
