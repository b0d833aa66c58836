"""protobuf (`macaron.v1`) ↔ the specialist's domain types. No grpc here; the servicer calls these."""

from __future__ import annotations

from macaron.specialist.finish import Finish, FinishKind
from macaron.specialist.events import Done, Event, Logprobs, RouteInfo, TextDelta, ToolCallDeltas
from macaron.specialist.sampling import SamplingRequest
from macaron.v1 import common_pb2 as pb

KIND_BY_NAME: dict[str, int] = {
    "chat": pb.SPECIALIST_KIND_CHAT,
    "agent": pb.SPECIALIST_KIND_AGENT,
    "code": pb.SPECIALIST_KIND_CODE,
    "ui": pb.SPECIALIST_KIND_UI,
}
NAME_BY_KIND: dict[int, str] = {v: k for k, v in KIND_BY_NAME.items()}

_FINISH_TO_PROTO: dict[FinishKind, int] = {
    "stop": pb.FINISH_REASON_STOP,
    "length": pb.FINISH_REASON_LENGTH,
    "tool_calls": pb.FINISH_REASON_TOOL_CALLS,
    "content_filter": pb.FINISH_REASON_CONTENT_FILTER,
    "abort": pb.FINISH_REASON_ABORT,
}
_FINISH_FROM_PROTO = {v: k for k, v in _FINISH_TO_PROTO.items()}


def sampling_from_proto(p: pb.SamplingParams) -> SamplingRequest:
    """Only the fields the caller set; the rest take the profile's defaults."""

    def get(name: str):  # type: ignore[no-untyped-def]
        return getattr(p, name) if p.HasField(name) else None

    return SamplingRequest(
        max_new_tokens=get("max_new_tokens"),
        temperature=get("temperature"),
        top_p=get("top_p"),
        top_k=get("top_k"),
        min_p=get("min_p"),
        frequency_penalty=get("frequency_penalty"),
        presence_penalty=get("presence_penalty"),
        repetition_penalty=get("repetition_penalty"),
        stop=tuple(p.stop),
        seed=get("seed"),
        min_new_tokens=get("min_new_tokens"),
    )


def finish_to_proto(finish: Finish) -> pb.Finish:
    out = pb.Finish(reason=_FINISH_TO_PROTO[finish.reason], message=finish.message, length=finish.length or 0)
    if isinstance(finish.matched, str):
        out.matched_text = finish.matched
    elif isinstance(finish.matched, int):
        out.matched_token_id = finish.matched
    return out


def finish_from_proto(finish: pb.Finish) -> Finish:
    matched = getattr(finish, finish.WhichOneof("matched")) if finish.WhichOneof("matched") else None
    return Finish(
        _FINISH_FROM_PROTO.get(finish.reason, "stop"),
        matched=matched,
        length=finish.length or None,
        message=finish.message,
    )


def route_decision(incoming: pb.RouteDecision, name: str, info: RouteInfo) -> pb.RouteDecision:
    """The router's decision (or DIRECT when there was none), completed with adapter and replica."""
    route = pb.RouteDecision()
    route.CopyFrom(incoming)
    route.specialist = KIND_BY_NAME[name]
    if route.reason == pb.ROUTE_REASON_UNSPECIFIED:
        route.reason = pb.ROUTE_REASON_DIRECT
        route.confidence = 1.0
    route.adapter = info.adapter
    route.adapter_version = info.adapter_version
    route.replica = info.replica
    return route


def event_to_chunk(event: Event, request_id: str, name: str, incoming_route: pb.RouteDecision) -> pb.GenerateChunk:
    """One stream chunk for one domain event."""
    chunk = pb.GenerateChunk(request_id=request_id)
    if isinstance(event, RouteInfo):
        chunk.route.CopyFrom(route_decision(incoming_route, name, event))
    elif isinstance(event, TextDelta):
        chunk.text = event.text
    elif isinstance(event, ToolCallDeltas):
        for d in event.deltas:
            chunk.tool_calls.add(index=d.index, id=d.id, type="function" if d.id else "", name=d.name,
                                 arguments=d.arguments)
    elif isinstance(event, Logprobs):
        for t in event.tokens:
            entry = chunk.logprobs.add(token=t.token, logprob=t.logprob, bytes=t.bytes)
            for top in t.top_logprobs:
                entry.top_logprobs.add(token=top.token, logprob=top.logprob, bytes=top.bytes)
    elif isinstance(event, Done):
        chunk.finish.CopyFrom(finish_to_proto(event.finish))
        chunk.usage.prompt_tokens = event.usage.prompt_tokens
        chunk.usage.completion_tokens = event.usage.completion_tokens
        chunk.usage.cached_tokens = event.usage.cached_tokens
    return chunk
