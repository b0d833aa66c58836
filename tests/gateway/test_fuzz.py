"""Property-based fuzzing of POST /v1/chat/completions: no body, however odd, gets a 5xx.

Bodies are drawn around the request model (known fields with values of any JSON type, huge
integers, lone surrogates, deep nesting, unknown fields) and sent to the gateway over a fake
router. Deterministic (`derandomize`) and bounded: a few hundred requests, a few seconds.
"""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_api.servers import ThreadedServer

TEXT = st.text(alphabet=st.characters(codec=None, categories=["L", "N", "P", "Zs", "Cs", "So"]), max_size=12)
SCALARS = st.one_of(
    st.none(), st.booleans(), TEXT,
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
)
JSON = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                     st.dictionaries(TEXT, inner, max_size=3)), max_leaves=8)
ROLES = st.sampled_from(["system", "developer", "user", "assistant", "tool", "robot"])
MESSAGE = st.fixed_dictionaries({"role": ROLES}, optional={
    "content": st.one_of(TEXT, JSON, st.lists(st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url"]),
                                                                     "text": TEXT}), max_size=2)),
    "tool_calls": JSON, "tool_call_id": TEXT, "name": TEXT,
})
FIELDS = {
    name: JSON for name in (
        "temperature", "top_p", "stop", "frequency_penalty", "presence_penalty", "tools", "tool_choice",
        "parallel_tool_calls", "user", "n", "logprobs", "top_logprobs", "logit_bias", "metadata", "store",
        "stream_options", "service_tier", "bogus",
    )
}
INTS = st.one_of(  # around the wire's limits (int32 token counts, int64 seeds), and anything
    *(st.integers(min_value=edge - 2, max_value=edge + 2) for edge in (0, 2**31, 2**32, 2**63, -(2**63), 2**64)),
    st.integers(min_value=-(2**65), max_value=2**65),
)
BODY = st.fixed_dictionaries(
    {"model": st.sampled_from(["macaron-auto", "macaron-code", "gpt-4o"]), "messages": st.lists(MESSAGE, max_size=3)},
    optional={
        **FIELDS,
        "max_tokens": INTS, "max_completion_tokens": INTS, "seed": INTS, "top_k": INTS, "min_p": JSON,
        "repetition_penalty": JSON,
        "response_format": st.one_of(JSON, st.fixed_dictionaries({
            "type": st.sampled_from(["text", "json_object", "json_schema"]),
            "json_schema": st.fixed_dictionaries({"name": TEXT, "schema": JSON}),
        })),
    },
)


BOUNDED = {"deadline": None, "derandomize": True, "database": None,  # the same examples on every run, none stored
           "suppress_health_check": [HealthCheck.function_scoped_fixture]}


@pytest.fixture(scope="module")
def http(dev_gateway: ThreadedServer):
    with httpx.Client(base_url=dev_gateway.url, timeout=20.0) as client:
        yield client


@settings(max_examples=250, **BOUNDED)
@given(body=BODY)
def test_no_request_body_gets_a_5xx(http: httpx.Client, body: dict) -> None:
    response = http.post("/v1/chat/completions", content=json.dumps(body).encode(),
                         headers={"content-type": "application/json"})
    assert response.status_code < 500, (body, response.text)
    assert response.headers["x-request-id"]
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"]


VALID_SHAPED = st.fixed_dictionaries(
    {"model": st.sampled_from(["macaron-auto", "macaron-chat"]),
     "messages": st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "system"]), "content": TEXT}),
                          min_size=1, max_size=3)},
    optional={
        "max_tokens": INTS, "max_completion_tokens": INTS, "seed": INTS,
        "temperature": st.floats(min_value=0, max_value=2), "top_p": st.floats(min_value=0.01, max_value=1),
        "stop": st.one_of(TEXT, st.lists(TEXT, max_size=4)), "user": TEXT, "metadata": st.dictionaries(TEXT, TEXT),
        "response_format": st.fixed_dictionaries({"type": st.just("json_schema"), "json_schema": st.fixed_dictionaries(
            {"name": st.just("out"), "schema": st.dictionaries(TEXT, JSON, max_size=3)})}),
    },
)


@settings(max_examples=150, **BOUNDED)
@given(body=VALID_SHAPED)
def test_valid_shaped_bodies_with_extreme_values_get_no_5xx(http: httpx.Client, body: dict) -> None:
    """Bodies that pass the shape checks reach the router: their values must fit the wire (int32, int64, UTF-8)."""
    response = http.post("/v1/chat/completions", content=json.dumps(body).encode(),
                         headers={"content-type": "application/json"})
    assert response.status_code < 500, (body, response.text)
    assert response.headers["x-request-id"]
