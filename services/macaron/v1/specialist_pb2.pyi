from macaron.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class InfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class InfoResponse(_message.Message):
    __slots__ = ("specialist", "name", "adapter", "adapter_version", "context_length", "sampling_defaults", "sampling_caps", "engine_replicas", "output_schema_json", "tool_call_parser")
    SPECIALIST_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADAPTER_FIELD_NUMBER: _ClassVar[int]
    ADAPTER_VERSION_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_DEFAULTS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_CAPS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_PARSER_FIELD_NUMBER: _ClassVar[int]
    specialist: _common_pb2.SpecialistKind
    name: str
    adapter: str
    adapter_version: str
    context_length: int
    sampling_defaults: _common_pb2.SamplingParams
    sampling_caps: _common_pb2.SamplingParams
    engine_replicas: _containers.RepeatedScalarFieldContainer[str]
    output_schema_json: str
    tool_call_parser: str
    def __init__(self, specialist: _Optional[_Union[_common_pb2.SpecialistKind, str]] = ..., name: _Optional[str] = ..., adapter: _Optional[str] = ..., adapter_version: _Optional[str] = ..., context_length: _Optional[int] = ..., sampling_defaults: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., sampling_caps: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., engine_replicas: _Optional[_Iterable[str]] = ..., output_schema_json: _Optional[str] = ..., tool_call_parser: _Optional[str] = ...) -> None: ...
