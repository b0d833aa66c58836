from macaron.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EndSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class EndSessionResponse(_message.Message):
    __slots__ = ("ended",)
    ENDED_FIELD_NUMBER: _ClassVar[int]
    ended: bool
    def __init__(self, ended: _Optional[bool] = ...) -> None: ...

class ClassifyRequest(_message.Message):
    __slots__ = ("request",)
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    request: _common_pb2.GenerateRequest
    def __init__(self, request: _Optional[_Union[_common_pb2.GenerateRequest, _Mapping]] = ...) -> None: ...

class SpecialistProbability(_message.Message):
    __slots__ = ("specialist", "probability")
    SPECIALIST_FIELD_NUMBER: _ClassVar[int]
    PROBABILITY_FIELD_NUMBER: _ClassVar[int]
    specialist: _common_pb2.SpecialistKind
    probability: float
    def __init__(self, specialist: _Optional[_Union[_common_pb2.SpecialistKind, str]] = ..., probability: _Optional[float] = ...) -> None: ...

class ClassifyResponse(_message.Message):
    __slots__ = ("route", "probabilities", "decision_ms")
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    PROBABILITIES_FIELD_NUMBER: _ClassVar[int]
    DECISION_MS_FIELD_NUMBER: _ClassVar[int]
    route: _common_pb2.RouteDecision
    probabilities: _containers.RepeatedCompositeFieldContainer[SpecialistProbability]
    decision_ms: float
    def __init__(self, route: _Optional[_Union[_common_pb2.RouteDecision, _Mapping]] = ..., probabilities: _Optional[_Iterable[_Union[SpecialistProbability, _Mapping]]] = ..., decision_ms: _Optional[float] = ...) -> None: ...
