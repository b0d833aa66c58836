"""Behaviour the chart's SGLang flags turn on, checked on the engine the services call.

- `--constrained-json-disable-any-whitespace`: constrained JSON has no free whitespace (the
  grammar fixes the separators to `", "` and `": "`, json.dumps's), so sampling cannot run away
  in blanks and the UI schema's size bound holds.
  (`--incremental-streaming-output` and `--max-queued-requests` are covered by
  test_overload_and_incremental.py: only new text per chunk, and a full queue answered 503.)
"""

from __future__ import annotations

import json

from engine_api.conftest import EngineTarget
from macaron.engine_client import AsyncEngineClient

SCHEMA = {
    "type": "object",
    "properties": {
        "a": {"type": "integer", "minimum": 0, "maximum": 999},
        "b": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
        "c": {"type": "string", "pattern": "^[a-z]{1,6}$"},
    },
    "required": ["a", "b", "c"],
    "additionalProperties": False,
}


async def test_constrained_json_has_no_free_whitespace(engine: EngineTarget) -> None:
    """Sampled hot (temperature 1.5): with whitespace allowed, blanks between tokens show up at once."""
    async with AsyncEngineClient(engine.url, timeout=60) as client:
        result = await client.generate(
            text="Give a JSON object:", lora_path=engine.adapters[0],
            sampling_params={"max_new_tokens": 96, "temperature": 1.5,
                             "json_schema": json.dumps(SCHEMA)},
        )
    assert result.meta_info.finish_reason.type == "stop", result.text
    value = json.loads(result.text)
    assert set(value) == {"a", "b", "c"}
    assert result.text == json.dumps(value), repr(result.text)  # no blank the grammar did not fix
