from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class VersionChange(_message.Message):
    __slots__ = ("at_unix_s", "actor", "action", "version", "reason", "detail")
    AT_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    at_unix_s: float
    actor: str
    action: str
    version: str
    reason: str
    detail: str
    def __init__(self, at_unix_s: _Optional[float] = ..., actor: _Optional[str] = ..., action: _Optional[str] = ..., version: _Optional[str] = ..., reason: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class LoadedVersion(_message.Message):
    __slots__ = ("version", "path", "status", "loaded_at_unix_s")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LOADED_AT_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    version: str
    path: str
    status: str
    loaded_at_unix_s: float
    def __init__(self, version: _Optional[str] = ..., path: _Optional[str] = ..., status: _Optional[str] = ..., loaded_at_unix_s: _Optional[float] = ...) -> None: ...

class SpecialistVersions(_message.Message):
    __slots__ = ("specialist", "adapter", "stable", "canary", "canary_share", "versions", "revision", "history")
    SPECIALIST_FIELD_NUMBER: _ClassVar[int]
    ADAPTER_FIELD_NUMBER: _ClassVar[int]
    STABLE_FIELD_NUMBER: _ClassVar[int]
    CANARY_FIELD_NUMBER: _ClassVar[int]
    CANARY_SHARE_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    specialist: str
    adapter: str
    stable: str
    canary: str
    canary_share: float
    versions: _containers.RepeatedCompositeFieldContainer[LoadedVersion]
    revision: int
    history: _containers.RepeatedCompositeFieldContainer[VersionChange]
    def __init__(self, specialist: _Optional[str] = ..., adapter: _Optional[str] = ..., stable: _Optional[str] = ..., canary: _Optional[str] = ..., canary_share: _Optional[float] = ..., versions: _Optional[_Iterable[_Union[LoadedVersion, _Mapping]]] = ..., revision: _Optional[int] = ..., history: _Optional[_Iterable[_Union[VersionChange, _Mapping]]] = ...) -> None: ...

class ListAdaptersRequest(_message.Message):
    __slots__ = ("history_limit",)
    HISTORY_LIMIT_FIELD_NUMBER: _ClassVar[int]
    history_limit: int
    def __init__(self, history_limit: _Optional[int] = ...) -> None: ...

class ListAdaptersResponse(_message.Message):
    __slots__ = ("specialists",)
    SPECIALISTS_FIELD_NUMBER: _ClassVar[int]
    specialists: _containers.RepeatedCompositeFieldContainer[SpecialistVersions]
    def __init__(self, specialists: _Optional[_Iterable[_Union[SpecialistVersions, _Mapping]]] = ...) -> None: ...

class LoadAdapterRequest(_message.Message):
    __slots__ = ("ref", "path", "reason")
    REF_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ref: str
    path: str
    reason: str
    def __init__(self, ref: _Optional[str] = ..., path: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class StartCanaryRequest(_message.Message):
    __slots__ = ("ref", "share", "reason")
    REF_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ref: str
    share: float
    reason: str
    def __init__(self, ref: _Optional[str] = ..., share: _Optional[float] = ..., reason: _Optional[str] = ...) -> None: ...

class PromoteRequest(_message.Message):
    __slots__ = ("specialist", "reason")
    SPECIALIST_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    specialist: str
    reason: str
    def __init__(self, specialist: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class RollbackRequest(_message.Message):
    __slots__ = ("specialist", "reason")
    SPECIALIST_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    specialist: str
    reason: str
    def __init__(self, specialist: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class UnloadAdapterRequest(_message.Message):
    __slots__ = ("ref", "reason")
    REF_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ref: str
    reason: str
    def __init__(self, ref: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...
