"""Client deadlines at the gateway: read from the headers, sent on as the router call's gRPC deadline, a 504 past them.

The fake router's `slow` answer streams for 100 s, so only a deadline ends it; the fake records
the deadline each call arrived with. The gateway's cap (router_timeout_s) is 10 s here.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from engine_api.servers import ThreadedServer
from macaron.gateway.deadline import OPENAI_READ_TIMEOUT_HEADER, TIMEOUT_HEADER, client_deadline
from macaron.gateway.errors import GatewayError
from sdk.fake_router import FakeRouterServer

CAP_S = 10.0
SLOW = [{"role": "user", "content": "slow"}]
HI = [{"role": "user", "content": "hi"}]


def post(server: ThreadedServer, body: dict, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(server.url + "/v1/chat/completions", json=body, headers=headers, timeout=20.0)


# ------------------------------------------------------------ reading the headers


def test_own_header_sets_the_whole_deadline_less_the_margin() -> None:
    d = client_deadline({TIMEOUT_HEADER: "30"}, stream=True, cap_s=600, margin_s=1.0, received_at=100.0)
    assert d.expires_at == pytest.approx(129.0) and d.first_chunk_by is None and d.source == TIMEOUT_HEADER


def test_margin_is_at_most_a_quarter_of_a_short_deadline() -> None:
    d = client_deadline({TIMEOUT_HEADER: "2"}, stream=False, cap_s=600, margin_s=1.0, received_at=0.0)
    assert d.expires_at == pytest.approx(1.5)


def test_openai_read_timeout_bounds_a_plain_answer_and_the_start_of_a_stream() -> None:
    plain = client_deadline({OPENAI_READ_TIMEOUT_HEADER: "20.0"}, stream=False, cap_s=600, margin_s=1.0, received_at=0.0)
    assert plain.expires_at == pytest.approx(19.0) and plain.first_chunk_by is None
    stream = client_deadline({OPENAI_READ_TIMEOUT_HEADER: "20.0"}, stream=True, cap_s=600, margin_s=1.0, received_at=0.0)
    assert stream.expires_at == pytest.approx(600.0) and stream.first_chunk_by == pytest.approx(19.0)


def test_own_header_wins_and_the_cap_bounds_both() -> None:
    both = {TIMEOUT_HEADER: "5", OPENAI_READ_TIMEOUT_HEADER: "3"}
    assert client_deadline(both, stream=False, cap_s=600, margin_s=1.0, received_at=0.0).expires_at == pytest.approx(4.0)
    for headers in ({TIMEOUT_HEADER: "900"}, {OPENAI_READ_TIMEOUT_HEADER: "900"}, {}):
        d = client_deadline(headers, stream=True, cap_s=600, margin_s=1.0, received_at=0.0)
        assert d.expires_at == pytest.approx(600.0) and d.first_chunk_by is None and d.source == "router_timeout_s"


def test_a_client_waiting_as_long_as_the_cap_still_gets_the_margin() -> None:
    """A client whose time equals the cap (or passes it by less than the margin) hears the 504 a margin before its
    own timer: with the cap alone, gateway and client would give up at the same moment and the answer be lost."""
    for seconds, expected in (("30", 28.0), ("31", 29.0), ("32", 30.0), ("40", 30.0)):
        d = client_deadline({TIMEOUT_HEADER: seconds}, stream=False, cap_s=30, margin_s=2.0, received_at=0.0)
        assert d.expires_at == pytest.approx(expected), seconds


@pytest.mark.parametrize("value", ["abc", "0", "-3", "nan", "inf", ""])
def test_a_bad_own_header_is_400_and_a_bad_openai_header_is_ignored(value: str) -> None:
    with pytest.raises(GatewayError) as err:
        client_deadline({TIMEOUT_HEADER: value}, stream=False, cap_s=600, margin_s=1.0)
    assert err.value.status == 400 and err.value.param == TIMEOUT_HEADER
    d = client_deadline({OPENAI_READ_TIMEOUT_HEADER: value}, stream=False, cap_s=600, margin_s=1.0, received_at=0.0)
    assert d.expires_at == pytest.approx(600.0)


# ------------------------------------------------------------ through the gateway


def test_router_call_gets_the_clients_remaining_time(dev_gateway: ThreadedServer, fake: FakeRouterServer) -> None:
    assert post(dev_gateway, {"model": "macaron-auto", "messages": HI}, {TIMEOUT_HEADER: "4"}).status_code == 200
    assert 0 < fake.servicer.calls[-1].deadline_s < 3.5  # 4 s less the margin (a quarter: 1 s; gRPC rounds up)
    assert post(dev_gateway, {"model": "macaron-auto", "messages": HI}, {}).status_code == 200
    assert 3.5 < fake.servicer.calls[-1].deadline_s < CAP_S + 0.5  # no client deadline: the gateway's own


def test_short_deadline_is_a_504_in_openai_shape_not_a_hang(dev_gateway: ThreadedServer, fake: FakeRouterServer) -> None:
    response = post(dev_gateway, {"model": "macaron-auto", "messages": SLOW}, {TIMEOUT_HEADER: "1.5"})
    assert response.status_code == 504, response.text
    error = response.json()["error"]
    assert error["type"] == "timeout" and error["code"] == "deadline_exceeded" and TIMEOUT_HEADER in error["message"]
    assert "x-request-id" in response.headers
    assert fake.servicer.calls[-1].deadline_s < 1.5  # the router call ends before the client gives up (1.125 s)


def test_official_client_with_a_short_timeout_gets_the_504_before_it_gives_up(dev_gateway: ThreadedServer,
                                                                              fake: FakeRouterServer) -> None:
    client = openai.OpenAI(base_url=dev_gateway.url + "/v1", api_key="unused", max_retries=0, timeout=2.0)
    with pytest.raises(openai.APIStatusError) as err:  # not openai.APITimeoutError: the gateway answered first
        client.chat.completions.create(model="macaron-auto", messages=SLOW)
    assert err.value.status_code == 504 and err.value.body["type"] == "timeout"
    assert fake.servicer.calls[-1].deadline_s < 2.0  # 1.5 s: before the client gives up


def test_stream_past_its_deadline_ends_with_an_error_event(dev_gateway: ThreadedServer, fake: FakeRouterServer) -> None:
    body = {"model": "macaron-auto", "messages": SLOW, "stream": True}
    with httpx.stream("POST", dev_gateway.url + "/v1/chat/completions", json=body, headers={TIMEOUT_HEADER: "2"},
                      timeout=20) as response:
        assert response.status_code == 200
        frames = [line[5:].strip() for line in response.iter_lines() if line.startswith("data:")]
    assert frames[-1] == "[DONE]"
    last = json.loads(frames[-2])
    assert last["error"]["type"] == "timeout", last
    assert any(json.loads(f)["choices"][0]["delta"].get("content") for f in frames[:-2])  # it had started


def test_openai_stream_may_run_past_its_read_timeout(dev_gateway: ThreadedServer, fake: FakeRouterServer) -> None:
    """A read timeout bounds each wait, not the whole stream: the router call keeps the gateway's deadline."""
    client = openai.OpenAI(base_url=dev_gateway.url + "/v1", api_key="unused", max_retries=0, timeout=2.0)
    stream = client.chat.completions.create(model="macaron-auto", messages=SLOW, stream=True)
    try:
        next(iter(stream))
    finally:
        stream.close()
    assert fake.servicer.calls[-1].deadline_s > 5.0


def test_bad_timeout_header_is_400(dev_gateway: ThreadedServer, fake: FakeRouterServer) -> None:
    response = post(dev_gateway, {"model": "macaron-auto", "messages": HI}, {TIMEOUT_HEADER: "soon"})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == TIMEOUT_HEADER


def test_legacy_completions_use_the_deadline_too(dev_gateway: ThreadedServer, fake: FakeRouterServer) -> None:
    response = httpx.post(dev_gateway.url + "/v1/completions", json={"model": "macaron-auto", "prompt": "slow"},
                          headers={TIMEOUT_HEADER: "1.5"}, timeout=20)
    assert response.status_code == 504 and response.json()["error"]["type"] == "timeout"


def test_load_generator_sends_the_gateways_header() -> None:
    from macaron.loadgen.transports import TIMEOUT_HEADER as LOADGEN_HEADER

    assert LOADGEN_HEADER == TIMEOUT_HEADER
