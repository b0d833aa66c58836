"""Fixtures of the fault tests: the multi-process stack of faults/stack.py, once per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from faults.stack import FaultStack, RedisServer, kill, start_fault_stack, stop_fault_stack

__all__ = ["FaultStack", "RedisServer", "kill"]


@pytest.fixture(scope="module")
def fault_stack(tiny_model, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultStack]:
    if not __import__("shutil").which("redis-server"):
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    stack = start_fault_stack(tmp_path_factory.mktemp("fault-stack"), tiny_model.model_dir, dict(tiny_model.adapters))
    try:
        yield stack
    finally:
        stop_fault_stack(stack)
