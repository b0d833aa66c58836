"""Fixtures of the chart tests: each example's render, made once per session."""

from __future__ import annotations

from typing import Any

import pytest
from helm_checks import EXAMPLES, VARIANTS, example_values, render_objects


@pytest.fixture(scope="session")
def renders() -> dict[str, list[dict[str, Any]]]:
    """Example name (default, venti, tall, cpu) → the objects the chart renders for it."""
    return {name: render_objects(example_values(name)) for name in EXAMPLES}


@pytest.fixture(scope="session")
def variant_renders() -> dict[str, list[dict[str, Any]]]:
    """Renders of values the examples leave out (helm_checks.VARIANTS)."""
    return {name: render_objects(values) for name, values in VARIANTS.items()}
