"""The OpenAI-compatible REST gateway (`macaron gateway`): `create_app(settings)` in app.py.

Importing this package stays light (the configuration imports `macaron.gateway.settings`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from macaron.gateway.app import create_app

        return create_app
    raise AttributeError(name)
