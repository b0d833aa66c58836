"""Small request builders and stream readers shared by the specialist tests."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import grpc

from macaron.v1 import common_pb2 as pb
from macaron.v1 import specialist_pb2_grpc

SPECIALIST_NAMES = ("chat", "agent", "code", "ui")

WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "pattern": "^[A-Za-z ]{1,20}$"},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "unit", "days"],
    "additionalProperties": False,
}
EMAIL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "to": {"type": "string", "pattern": "^[a-z]{1,12}@example[.]com$"},
        "urgent": {"type": "boolean"},
    },
    "required": ["to", "urgent"],
    "additionalProperties": False,
}
TOOL_SCHEMAS = {"get_weather": WEATHER_SCHEMA, "send_email": EMAIL_SCHEMA}


def tools() -> list[pb.Tool]:
    """Two bounded tools (their arguments always finish under constrained decoding)."""
    return [
        pb.Tool(type="function", function=pb.FunctionDefinition(name=name, description=f"{name} tool",
                                                               parameters_json=json.dumps(schema)))
        for name, schema in TOOL_SCHEMAS.items()
    ]


def user(text: str) -> pb.ChatMessage:
    return pb.ChatMessage(role=pb.ROLE_USER, content=text)


def request(text: str = "Hello, how are you?", **fields: Any) -> pb.GenerateRequest:
    """A one-turn request; keyword fields are GenerateRequest fields."""
    return pb.GenerateRequest(messages=[user(text)], **fields)


def stub(port: int) -> specialist_pb2_grpc.SpecialistStub:
    return specialist_pb2_grpc.SpecialistStub(grpc.insecure_channel(f"127.0.0.1:{port}"))


@dataclass
class Result:
    """A whole stream, read."""

    chunks: list[pb.GenerateChunk]

    @property
    def text(self) -> str:
        return "".join(c.text for c in self.chunks)

    @property
    def calls(self) -> list[pb.ToolCallDelta]:
        """The whole calls: streamed deltas merged by index, as OpenAI clients merge them."""
        merged: dict[int, pb.ToolCallDelta] = {}
        for c in self.chunks:
            for d in c.tool_calls:
                call = merged.setdefault(d.index, pb.ToolCallDelta(index=d.index))
                call.id, call.type, call.name = call.id or d.id, call.type or d.type, call.name or d.name
                call.arguments += d.arguments
        return [merged[i] for i in sorted(merged)]

    @property
    def route(self) -> pb.RouteDecision:
        return self.chunks[0].route

    @property
    def finish(self) -> pb.Finish:
        return self.chunks[-1].finish


def generate(s: specialist_pb2_grpc.SpecialistStub, req: pb.GenerateRequest, timeout: float = 60.0) -> Result:
    return Result(list(s.Generate(req, timeout=timeout)))


def error_of(s: specialist_pb2_grpc.SpecialistStub, req: pb.GenerateRequest, timeout: float = 30.0) -> grpc.RpcError:
    """The RpcError a request ends with (fails the test if it succeeds)."""
    try:
        list(s.Generate(req, timeout=timeout))
    except grpc.RpcError as exc:
        return exc
    raise AssertionError("the request succeeded; an error was expected")
