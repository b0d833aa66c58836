"""The router benchmark's cached-token ceiling (`loadtest/bench_router.py: cached_ceiling`) on cases checked by hand:
the figure every placement arm is compared with, so a wrong ceiling would misstate how far from the best each is."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "loadtest" / "bench_router.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_router_under_test", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def r(a: int, b: int) -> list[int]:
    return list(range(a, b + 1))


def test_prefix_reuse_counts_whole_blocks_per_adapter_short_of_the_last_token(bench: ModuleType) -> None:
    requests = [
        [("x", r(1, 10)), ("x", r(1, 12))],          # A: nothing before it; then its own 10 tokens -> 8 (2 blocks)
        [("x", [*r(1, 6), 20, 21]), ("x", [*r(1, 6), 20, 21, 22])],  # B: 6 shared with A -> 4; then its own 8 -> 8
        [("y", r(1, 10))],                           # C: the same tokens as A under another adapter -> 0
        [("y", r(1, 8))],                            # D: all 8 tokens seen under y, but not its last one: 7 -> 4
    ]
    assert bench.cached_ceiling(requests, block_size=4) == 0 + 4 + 0 + 4 + 8 + 8


def test_every_sessions_turn_t_comes_before_any_turn_t_plus_1(bench: ModuleType) -> None:
    # S2's first turn cannot reuse S1's second turn (sent later); S1's second turn reuses 7 of S2's first: 4.
    # Session by session it would be 8 (S2's first turn reusing all 8 tokens of S1's second).
    requests = [[("x", [1, 2, 3]), ("x", r(1, 8))], [("x", [*r(1, 8), 99, 100, 101, 102])]]
    assert bench.cached_ceiling(requests, block_size=4) == 4


def test_applications_shape_shares_one_head_per_application_under_one_adapter(bench: ModuleType) -> None:
    systems = bench.system_prompts(2, 400, seed=13)
    assert len(systems) == 2 and all(len(s) >= 400 for s in systems) and systems[0] != systems[1]
    specialists = [bench.session_specialist(s, systems, apps=2) for s in range(6)]
    assert specialists == ["chat", "agent"] * 3
    users = [f"question {i}" for i in range(30)]
    firsts = [bench.conversation(s, 2, systems, users, salt="s")[0][0]["content"] for s in range(6)]
    assert firsts[0] == firsts[2] == firsts[4] != firsts[1] == firsts[3] == firsts[5]
    # the mixed shape keeps sessions of one system prompt on several specialists
    mixed = bench.system_prompts(4, 100, seed=11)
    assert len({bench.session_specialist(s, mixed) for s in range(0, 9, 4)}) > 1


def test_the_working_set_counts_a_head_shared_under_one_adapter_once(bench: ModuleType) -> None:
    """The KV-pressure rule sizes each engine's cache from the working set: the unique tokens of every session's
    last request. Two sessions behind one 100-token head under one adapter need 100 + 50 + 60 tokens, not 310;
    the same head under another adapter is another cache entry."""
    head = r(1, 100)
    one, two = head + r(1001, 1050), head + r(2001, 2060)
    assert bench.unique_tokens([("chat", one), ("chat", two)]) == 210
    assert bench.unique_tokens([("chat", one), ("code", two)]) == 310
    assert bench.unique_tokens([("chat", one), ("chat", one[:120])]) == 150  # a prefix of another adds nothing
    assert bench.unique_tokens([("chat", one[:120]), ("chat", one)]) == 150


def test_heads_per_replica_counts_the_applications_each_replica_serves(bench: ModuleType) -> None:
    run = bench.RunResult("x", apps=2)
    for s, replica in [(0, "a"), (1, "b"), (2, "a"), (3, "a"), (4, "c")]:
        run.by_session[s] = [bench.Turn(0.1, 10, 5, "", replica=replica)]
    assert run.spread() == ([3, 1, 1], 0)
    assert run.heads() == [2, 1, 1]  # a serves sessions of both applications: both heads are prefilled there
    assert bench.RunResult("y").heads() is None
