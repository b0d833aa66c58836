"""The load generator's parts that need no server: config bounds, workload, statistics, the CLI parser."""

from __future__ import annotations

import json

import pytest

from macaron.loadgen import LoadConfig, LoadReport, LoopbackOnlyError, RequestResult, Workload
from macaron.loadgen.report import percentile
from macaron.loadgen.workload import load_dev_prompts


def test_only_loopback_targets_are_loaded() -> None:
    LoadConfig("http://127.0.0.1:8080", rate=1).validate()
    LoadConfig("localhost:50051", transport="grpc", concurrency=2).validate()
    for target in ("http://8.8.8.8:80", "http://10.0.0.1:8080"):
        with pytest.raises(LoopbackOnlyError, match="loopback"):
            LoadConfig(target, rate=1).validate()


@pytest.mark.parametrize("changes, message", [
    ({"rate": 1, "concurrency": 2}, "exactly one"),
    ({}, "exactly one"),
    ({"rate": 1, "duration_s": 0}, "duration"),
    ({"rate": 1, "max_requests": 0}, "max_requests"),
    ({"rate": 1, "timeout_s": 10_000}, "timeout"),
])
def test_unbounded_or_ambiguous_runs_are_refused(changes: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LoadConfig("http://127.0.0.1:8080", **changes).validate()


def test_sessions_cover_every_specialist_and_grow_their_history() -> None:
    prompts = load_dev_prompts()
    workload = Workload(prompts, turns=3, seed=1)
    sessions = [workload.new_session() for _ in range(8)]
    assert {s.label for s in sessions} == {"agent", "chat", "code", "ui"}
    assert len({s.system_prompt for s in sessions}) > 1  # a few shared system prompts, reused across sessions
    assert all(p.label == s.label for s in sessions for p in s.prompts)
    session = sessions[0]
    first = session.next_messages()
    assert [m["role"] for m in first] == ["system", "user"]
    session.record("answer one")
    second = session.next_messages()
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[:2] == first  # the history is a prefix of the next turn (what the prefix cache reuses)
    session.record("")
    session.record("three")
    assert session.done


def test_percentiles_and_summary_count_every_outcome() -> None:
    assert percentile([], 50) is None
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile([5.0], 99) == 5.0
    results = [
        RequestResult("s1", 0, "code", 0.0, outcome="ok", specialist="code", ttft_s=0.1, e2e_s=0.2,
                      prompt_tokens=100, cached_tokens=40),
        RequestResult("s2", 0, "chat", 0.1, outcome="ok", specialist="chat", ttft_s=0.3, e2e_s=0.5,
                      prompt_tokens=100, cached_tokens=10),
        RequestResult("s3", 0, "ui", 0.2, outcome="http_429", retry_after_s=1.0),
        RequestResult("s4", 0, "ui", 0.3),  # never answered: lost
    ]
    report = LoadReport(results, elapsed_s=2.0, mode="open loop 2 req/s", transport="rest")
    s = report.summary()
    assert (s["sent"], s["completed"], s["clear_errors"], s["lost"]) == (4, 2, 1, 1)
    assert s["errors"] == {"http_429": 1, "lost": 1}
    assert s["route_mix"] == {"chat": 0.5, "code": 0.5}
    assert s["cached_token_share"] == pytest.approx(0.25)
    assert s["requests_per_s"] == pytest.approx(1.0)
    assert s["per_specialist"]["code"]["ttft"]["p50_ms"] == pytest.approx(100.0)
    table = report.table()
    assert "http_429 x1" in table and "lost x1" in table and "code" in table
    json.dumps(s)


def test_json_and_plot_files(tmp_path) -> None:
    results = [RequestResult(f"s{i}", 0, "code", i * 0.1, outcome="ok", specialist="code", ttft_s=0.01, e2e_s=0.02 * i)
               for i in range(5)]
    report = LoadReport(results, elapsed_s=1.0, mode="closed loop x1", transport="grpc")
    body = json.loads(report.write_json(tmp_path / "out.json").read_text())
    assert body["summary"]["completed"] == 5 and len(body["requests"]) == 5
    pytest.importorskip("matplotlib")
    png = report.plot(tmp_path / "out.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_is_registered_and_refuses_remote_targets(capsys) -> None:
    from macaron.cli import build_parser, main

    args = build_parser().parse_args(["loadtest", "--url", "http://127.0.0.1:1", "--rate", "2", "--duration", "1"])
    assert args.command == "loadtest" and args.rate == 2
    assert main(["loadtest", "--url", "http://192.0.2.1:8080", "--rate", "1"]) == 2
    assert "loopback" in capsys.readouterr().err
