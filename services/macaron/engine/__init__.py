"""The embedded engine: one frozen base model, many LoRA adapters, an SGLang-shaped API.

`LLMEngine` is the synchronous core (add_request / abort / step); `AsyncLLMEngine` runs it in a
background thread behind the AsyncEngine protocol the HTTP server uses. Names are imported on
first use, so reading `macaron.engine.args` (every service's config does) never loads torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "AsyncLLMEngine": "macaron.engine.async_engine",
    "EngineArgs": "macaron.engine.args",
    "GenerateRequest": "macaron.engine.protocol",
    "LLMEngine": "macaron.engine.engine",
    "RequestOutput": "macaron.engine.protocol",
    "SamplingParams": "macaron.engine.sampling_params",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'macaron.engine' has no attribute {name!r}")
