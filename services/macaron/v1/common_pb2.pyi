from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLE_UNSPECIFIED: _ClassVar[Role]
    ROLE_SYSTEM: _ClassVar[Role]
    ROLE_USER: _ClassVar[Role]
    ROLE_ASSISTANT: _ClassVar[Role]
    ROLE_TOOL: _ClassVar[Role]
    ROLE_DEVELOPER: _ClassVar[Role]

class SpecialistKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SPECIALIST_KIND_UNSPECIFIED: _ClassVar[SpecialistKind]
    SPECIALIST_KIND_CHAT: _ClassVar[SpecialistKind]
    SPECIALIST_KIND_AGENT: _ClassVar[SpecialistKind]
    SPECIALIST_KIND_CODE: _ClassVar[SpecialistKind]
    SPECIALIST_KIND_UI: _ClassVar[SpecialistKind]

class ToolChoiceMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_CHOICE_MODE_UNSPECIFIED: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_AUTO: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_NONE: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_REQUIRED: _ClassVar[ToolChoiceMode]

class ResponseFormatType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESPONSE_FORMAT_TYPE_UNSPECIFIED: _ClassVar[ResponseFormatType]
    RESPONSE_FORMAT_TYPE_TEXT: _ClassVar[ResponseFormatType]
    RESPONSE_FORMAT_TYPE_JSON_OBJECT: _ClassVar[ResponseFormatType]
    RESPONSE_FORMAT_TYPE_JSON_SCHEMA: _ClassVar[ResponseFormatType]

class RouteReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROUTE_REASON_UNSPECIFIED: _ClassVar[RouteReason]
    ROUTE_REASON_EXPLICIT: _ClassVar[RouteReason]
    ROUTE_REASON_SESSION: _ClassVar[RouteReason]
    ROUTE_REASON_CLASSIFIER: _ClassVar[RouteReason]
    ROUTE_REASON_JUDGE: _ClassVar[RouteReason]
    ROUTE_REASON_DEFAULT: _ClassVar[RouteReason]
    ROUTE_REASON_DIRECT: _ClassVar[RouteReason]

class FinishReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FINISH_REASON_UNSPECIFIED: _ClassVar[FinishReason]
    FINISH_REASON_STOP: _ClassVar[FinishReason]
    FINISH_REASON_LENGTH: _ClassVar[FinishReason]
    FINISH_REASON_TOOL_CALLS: _ClassVar[FinishReason]
    FINISH_REASON_CONTENT_FILTER: _ClassVar[FinishReason]
    FINISH_REASON_ABORT: _ClassVar[FinishReason]
ROLE_UNSPECIFIED: Role
ROLE_SYSTEM: Role
ROLE_USER: Role
ROLE_ASSISTANT: Role
ROLE_TOOL: Role
ROLE_DEVELOPER: Role
SPECIALIST_KIND_UNSPECIFIED: SpecialistKind
SPECIALIST_KIND_CHAT: SpecialistKind
SPECIALIST_KIND_AGENT: SpecialistKind
SPECIALIST_KIND_CODE: SpecialistKind
SPECIALIST_KIND_UI: SpecialistKind
TOOL_CHOICE_MODE_UNSPECIFIED: ToolChoiceMode
TOOL_CHOICE_MODE_AUTO: ToolChoiceMode
TOOL_CHOICE_MODE_NONE: ToolChoiceMode
TOOL_CHOICE_MODE_REQUIRED: ToolChoiceMode
RESPONSE_FORMAT_TYPE_UNSPECIFIED: ResponseFormatType
RESPONSE_FORMAT_TYPE_TEXT: ResponseFormatType
RESPONSE_FORMAT_TYPE_JSON_OBJECT: ResponseFormatType
RESPONSE_FORMAT_TYPE_JSON_SCHEMA: ResponseFormatType
ROUTE_REASON_UNSPECIFIED: RouteReason
ROUTE_REASON_EXPLICIT: RouteReason
ROUTE_REASON_SESSION: RouteReason
ROUTE_REASON_CLASSIFIER: RouteReason
ROUTE_REASON_JUDGE: RouteReason
ROUTE_REASON_DEFAULT: RouteReason
ROUTE_REASON_DIRECT: RouteReason
FINISH_REASON_UNSPECIFIED: FinishReason
FINISH_REASON_STOP: FinishReason
FINISH_REASON_LENGTH: FinishReason
FINISH_REASON_TOOL_CALLS: FinishReason
FINISH_REASON_CONTENT_FILTER: FinishReason
FINISH_REASON_ABORT: FinishReason

class FunctionCall(_message.Message):
    __slots__ = ("name", "arguments")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    arguments: str
    def __init__(self, name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("id", "type", "function")
    ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_FIELD_NUMBER: _ClassVar[int]
    id: str
    type: str
    function: FunctionCall
    def __init__(self, id: _Optional[str] = ..., type: _Optional[str] = ..., function: _Optional[_Union[FunctionCall, _Mapping]] = ...) -> None: ...

class ChatMessage(_message.Message):
    __slots__ = ("role", "content", "name", "tool_calls", "tool_call_id")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    role: Role
    content: str
    name: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    tool_call_id: str
    def __init__(self, role: _Optional[_Union[Role, str]] = ..., content: _Optional[str] = ..., name: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., tool_call_id: _Optional[str] = ...) -> None: ...

class FunctionDefinition(_message.Message):
    __slots__ = ("name", "description", "parameters_json", "strict")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_JSON_FIELD_NUMBER: _ClassVar[int]
    STRICT_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    parameters_json: str
    strict: bool
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters_json: _Optional[str] = ..., strict: _Optional[bool] = ...) -> None: ...

class Tool(_message.Message):
    __slots__ = ("type", "function")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_FIELD_NUMBER: _ClassVar[int]
    type: str
    function: FunctionDefinition
    def __init__(self, type: _Optional[str] = ..., function: _Optional[_Union[FunctionDefinition, _Mapping]] = ...) -> None: ...

class ToolChoice(_message.Message):
    __slots__ = ("mode", "function_name")
    MODE_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_NAME_FIELD_NUMBER: _ClassVar[int]
    mode: ToolChoiceMode
    function_name: str
    def __init__(self, mode: _Optional[_Union[ToolChoiceMode, str]] = ..., function_name: _Optional[str] = ...) -> None: ...

class JsonSchemaFormat(_message.Message):
    __slots__ = ("name", "description", "schema_json", "strict")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    STRICT_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    schema_json: str
    strict: bool
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., schema_json: _Optional[str] = ..., strict: _Optional[bool] = ...) -> None: ...

class ResponseFormat(_message.Message):
    __slots__ = ("type", "json_schema")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    JSON_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    type: ResponseFormatType
    json_schema: JsonSchemaFormat
    def __init__(self, type: _Optional[_Union[ResponseFormatType, str]] = ..., json_schema: _Optional[_Union[JsonSchemaFormat, _Mapping]] = ...) -> None: ...

class SamplingParams(_message.Message):
    __slots__ = ("max_new_tokens", "temperature", "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty", "stop", "seed", "min_new_tokens")
    MAX_NEW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    MIN_P_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    REPETITION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    MIN_NEW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    max_new_tokens: int
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    frequency_penalty: float
    presence_penalty: float
    repetition_penalty: float
    stop: _containers.RepeatedScalarFieldContainer[str]
    seed: int
    min_new_tokens: int
    def __init__(self, max_new_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., min_p: _Optional[float] = ..., frequency_penalty: _Optional[float] = ..., presence_penalty: _Optional[float] = ..., repetition_penalty: _Optional[float] = ..., stop: _Optional[_Iterable[str]] = ..., seed: _Optional[int] = ..., min_new_tokens: _Optional[int] = ...) -> None: ...

class RouteDecision(_message.Message):
    __slots__ = ("specialist", "adapter", "adapter_version", "reason", "confidence", "replica", "detail", "route_ms", "predicted_cached_tokens", "timing")
    SPECIALIST_FIELD_NUMBER: _ClassVar[int]
    ADAPTER_FIELD_NUMBER: _ClassVar[int]
    ADAPTER_VERSION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    ROUTE_MS_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TIMING_FIELD_NUMBER: _ClassVar[int]
    specialist: SpecialistKind
    adapter: str
    adapter_version: str
    reason: RouteReason
    confidence: float
    replica: str
    detail: str
    route_ms: float
    predicted_cached_tokens: int
    timing: RouteTiming
    def __init__(self, specialist: _Optional[_Union[SpecialistKind, str]] = ..., adapter: _Optional[str] = ..., adapter_version: _Optional[str] = ..., reason: _Optional[_Union[RouteReason, str]] = ..., confidence: _Optional[float] = ..., replica: _Optional[str] = ..., detail: _Optional[str] = ..., route_ms: _Optional[float] = ..., predicted_cached_tokens: _Optional[int] = ..., timing: _Optional[_Union[RouteTiming, _Mapping]] = ...) -> None: ...

class RouteTiming(_message.Message):
    __slots__ = ("admit_ms", "state_read_ms", "classify_ms", "judge_ms", "placement_ms", "servicer_ms")
    ADMIT_MS_FIELD_NUMBER: _ClassVar[int]
    STATE_READ_MS_FIELD_NUMBER: _ClassVar[int]
    CLASSIFY_MS_FIELD_NUMBER: _ClassVar[int]
    JUDGE_MS_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_MS_FIELD_NUMBER: _ClassVar[int]
    SERVICER_MS_FIELD_NUMBER: _ClassVar[int]
    admit_ms: float
    state_read_ms: float
    classify_ms: float
    judge_ms: float
    placement_ms: float
    servicer_ms: float
    def __init__(self, admit_ms: _Optional[float] = ..., state_read_ms: _Optional[float] = ..., classify_ms: _Optional[float] = ..., judge_ms: _Optional[float] = ..., placement_ms: _Optional[float] = ..., servicer_ms: _Optional[float] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("request_id", "session_id", "messages", "tools", "tool_choice", "response_format", "sampling", "specialist", "engine_replica_hint", "metadata", "route", "logprobs", "top_logprobs", "parallel_tool_calls", "prompt", "routed_prompt")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FORMAT_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    SPECIALIST_FIELD_NUMBER: _ClassVar[int]
    ENGINE_REPLICA_HINT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    PARALLEL_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    ROUTED_PROMPT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    session_id: str
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    tools: _containers.RepeatedCompositeFieldContainer[Tool]
    tool_choice: ToolChoice
    response_format: ResponseFormat
    sampling: SamplingParams
    specialist: SpecialistKind
    engine_replica_hint: str
    metadata: _containers.ScalarMap[str, str]
    route: RouteDecision
    logprobs: bool
    top_logprobs: int
    parallel_tool_calls: bool
    prompt: str
    routed_prompt: RoutedPrompt
    def __init__(self, request_id: _Optional[str] = ..., session_id: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ..., tools: _Optional[_Iterable[_Union[Tool, _Mapping]]] = ..., tool_choice: _Optional[_Union[ToolChoice, _Mapping]] = ..., response_format: _Optional[_Union[ResponseFormat, _Mapping]] = ..., sampling: _Optional[_Union[SamplingParams, _Mapping]] = ..., specialist: _Optional[_Union[SpecialistKind, str]] = ..., engine_replica_hint: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., route: _Optional[_Union[RouteDecision, _Mapping]] = ..., logprobs: _Optional[bool] = ..., top_logprobs: _Optional[int] = ..., parallel_tool_calls: _Optional[bool] = ..., prompt: _Optional[str] = ..., routed_prompt: _Optional[_Union[RoutedPrompt, _Mapping]] = ...) -> None: ...

class RoutedPrompt(_message.Message):
    __slots__ = ("token_ids", "render_key")
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    RENDER_KEY_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    render_key: str
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., render_key: _Optional[str] = ...) -> None: ...

class Finish(_message.Message):
    __slots__ = ("reason", "matched_text", "matched_token_id", "length", "message")
    REASON_FIELD_NUMBER: _ClassVar[int]
    MATCHED_TEXT_FIELD_NUMBER: _ClassVar[int]
    MATCHED_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    reason: FinishReason
    matched_text: str
    matched_token_id: int
    length: int
    message: str
    def __init__(self, reason: _Optional[_Union[FinishReason, str]] = ..., matched_text: _Optional[str] = ..., matched_token_id: _Optional[int] = ..., length: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("prompt_tokens", "completion_tokens", "cached_tokens")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ...) -> None: ...

class ToolCallDelta(_message.Message):
    __slots__ = ("index", "id", "type", "name", "arguments")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    index: int
    id: str
    type: str
    name: str
    arguments: str
    def __init__(self, index: _Optional[int] = ..., id: _Optional[str] = ..., type: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class TopLogprob(_message.Message):
    __slots__ = ("token", "logprob", "bytes")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    token: str
    logprob: float
    bytes: bytes
    def __init__(self, token: _Optional[str] = ..., logprob: _Optional[float] = ..., bytes: _Optional[bytes] = ...) -> None: ...

class TokenLogprob(_message.Message):
    __slots__ = ("token", "logprob", "bytes", "top_logprobs")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    token: str
    logprob: float
    bytes: bytes
    top_logprobs: _containers.RepeatedCompositeFieldContainer[TopLogprob]
    def __init__(self, token: _Optional[str] = ..., logprob: _Optional[float] = ..., bytes: _Optional[bytes] = ..., top_logprobs: _Optional[_Iterable[_Union[TopLogprob, _Mapping]]] = ...) -> None: ...

class GenerateChunk(_message.Message):
    __slots__ = ("request_id", "text", "tool_calls", "finish", "usage", "route", "logprobs")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    FINISH_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    text: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCallDelta]
    finish: Finish
    usage: Usage
    route: RouteDecision
    logprobs: _containers.RepeatedCompositeFieldContainer[TokenLogprob]
    def __init__(self, request_id: _Optional[str] = ..., text: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCallDelta, _Mapping]]] = ..., finish: _Optional[_Union[Finish, _Mapping]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., route: _Optional[_Union[RouteDecision, _Mapping]] = ..., logprobs: _Optional[_Iterable[_Union[TokenLogprob, _Mapping]]] = ...) -> None: ...
