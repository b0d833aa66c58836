"""Reads a request body as JSON that every later hop can carry: bounded nesting, valid UTF-8 text.

`json.loads` recurses (a body nested ~1,000 deep raises RecursionError), deep schemas blow the
grammar compiler's stack, and a lone surrogate (`"\\ud800"`, legal JSON) cannot be encoded into
a protobuf string. Each is answered here as a 400 naming the field, before anything else runs.
"""

from __future__ import annotations

import json
from typing import Any

from macaron.gateway.errors import GatewayError

INVALID_JSON = "We could not parse the JSON body of your request."


def parse_json_body(raw: bytes, max_depth: int) -> dict[str, Any]:
    """The body as a JSON object; a 400 for bad JSON, too deep nesting or unencodable text."""
    try:
        data = json.loads(raw)
    except RecursionError:
        raise too_deep(max_depth) from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise GatewayError(400, INVALID_JSON, code="invalid_json") from None
    if not isinstance(data, dict):
        raise GatewayError(400, "The request body must be a JSON object.", code="invalid_json")
    check_json_value(data, max_depth)
    return data


def too_deep(max_depth: int, param: str | None = None) -> GatewayError:
    return GatewayError(
        400, f"The request body is nested too deeply: at most {max_depth} levels of objects and arrays are allowed.",
        param=param, code="invalid_value",
    )


def check_json_value(value: Any, max_depth: int) -> None:
    """Walks the parsed body without recursion: nesting depth, and strings that are not valid Unicode."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            if not _encodable(item):
                raise GatewayError(
                    400, f"Invalid value for '{path}': the text contains a lone surrogate (\\ud800-\\udfff), "
                    "which is not valid Unicode; send UTF-8 text.", param=path or None, code="invalid_value",
                )
            continue
        if not isinstance(item, (dict, list)):
            continue
        if depth >= max_depth:
            raise too_deep(max_depth, path or None)
        if isinstance(item, dict):
            for key, child in item.items():
                child_path = f"{path}.{key}" if path else str(key)
                if not _encodable(key):
                    raise GatewayError(400, f"Invalid key under '{path or 'body'}': a lone surrogate is not valid "
                                       "Unicode.", param=path or None, code="invalid_value")
                stack.append((child, child_path, depth + 1))
        else:
            stack.extend((child, f"{path}[{i}]", depth + 1) for i, child in enumerate(item))


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
