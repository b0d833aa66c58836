"""OpenAI chat-completions request and response models (the subset Macaron serves).

Requests are validated here so that bad input is a 400 in OpenAI's error shape naming the
field (`param`), before anything reaches the router. Fields OpenAI defines that Macaron
cannot honour are refused when set to a value that would change the answer (`n` > 1,
`logit_bias`, audio, images), and accepted when harmless (`store`, `metadata`,
`service_tier`, ...). `parallel_tool_calls: false` is honoured (generation stops after the first
tool call); `logprobs` / `top_logprobs` (0 to 20) come back in OpenAI's shape. The
sampling extras of vLLM's and SGLang's servers (`top_k`, `min_p`, `repetition_penalty`,
`min_tokens`) are accepted. Unknown fields are a 400, as OpenAI does.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from macaron.prompting.formats import is_named_format, named_formats_hint
from macaron.sdk import MODELS


INT32_MAX = 2**31 - 1
"""Token counts travel as protobuf int32."""
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""Seeds travel as protobuf int64."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------- request


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class ImagePart(_Strict):
    """Accepted by the schema only to answer a clear 400: Macaron's models read text."""

    model_config = ConfigDict(extra="allow")
    type: Literal["image_url", "input_audio", "file"]


ContentPart = Annotated[Union[TextPart, ImagePart], Field(discriminator="type")]
Content = Union[str, list[ContentPart]]


class FunctionCall(_Strict):
    name: str
    arguments: str = Field(description="JSON text of the arguments object.")


class ToolCall(_Strict):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class SystemMessage(_Strict):
    role: Literal["system", "developer"]
    content: Content
    name: str | None = None


class UserMessage(_Strict):
    role: Literal["user"]
    content: Content
    name: str | None = None


class AssistantMessage(_Strict):
    role: Literal["assistant"]
    content: Content | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    refusal: str | None = None


class ToolMessage(_Strict):
    role: Literal["tool"]
    content: Content
    tool_call_id: str


Message = Annotated[Union[SystemMessage, UserMessage, AssistantMessage, ToolMessage], Field(discriminator="role")]


class FunctionDefinition(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Strict):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(_Strict):
    name: str


class NamedToolChoice(_Strict):
    type: Literal["function"] = "function"
    function: NamedFunction


class JsonSchema(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ResponseFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchema | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> ResponseFormat:
        js = self.json_schema
        if self.type == "json_schema" and (js is None or (js.schema_ is None and not is_named_format(js.name))):
            raise ValueError(
                "response_format of type json_schema needs json_schema.schema, or a name the specialists know "
                f"without one: {named_formats_hint()}"
            )
        return self


class StreamOptions(_Strict):
    include_usage: bool | None = None
    include_obfuscation: bool | None = None


class ChatCompletionRequest(_Strict):
    """POST /v1/chat/completions (OpenAI's names and ranges)."""

    messages: list[Message] = Field(min_length=1)
    model: str
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1, le=INT32_MAX)
    max_completion_tokens: int | None = Field(None, ge=1, le=INT32_MAX)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=INT64_MIN, le=INT64_MAX)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    # Sampling extras vLLM's and SGLang's OpenAI servers accept.
    top_k: int | None = Field(None, ge=-1, le=INT32_MAX, description="-1 (or 0) is off.")
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(None, gt=0.0, le=2.0)
    min_tokens: int | None = Field(None, ge=0, le=INT32_MAX)
    tools: list[Tool] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    user: str | None = Field(None, max_length=256)
    n: int | None = Field(None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    logit_bias: dict[str, float] | None = None
    # Accepted and ignored: they do not change the answer.
    store: bool | None = None
    metadata: dict[str, str] | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None

    @field_validator("stop")
    @classmethod
    def _stop(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and len(value) > 4:
            raise ValueError("at most 4 stop sequences are allowed")
        return value

    def unsupported(self) -> tuple[str, str] | None:
        """(param, message) of the first value Macaron cannot honour, else None."""
        if self.model not in MODELS:
            return "model", f"The model `{self.model}` does not exist; use one of {', '.join(MODELS)}."
        if self.n not in (None, 1):
            return "n", "n > 1 is not supported: Macaron returns one choice per request."
        if self.top_logprobs is not None and not self.logprobs:
            return "top_logprobs", "top_logprobs needs logprobs set to true."
        if self.logit_bias:
            return "logit_bias", "logit_bias is not supported by Macaron Serve."
        if self.stream_options is not None and not self.stream:
            return "stream_options", "stream_options is only allowed when stream is true."
        if self.tool_choice not in (None, "auto", "none") and not self.tools:
            return "tool_choice", "tool_choice requires tools to be offered."
        for i, message in enumerate(self.messages):
            parts = message.content if isinstance(message.content, list) else []
            for j, part in enumerate(parts):
                if isinstance(part, ImagePart):
                    return f"messages[{i}].content[{j}]", f"content parts of type {part.type} are not supported; send text."
        return None

    @property
    def specialist(self) -> str:
        return MODELS.get(self.model) or "auto"

    @property
    def output_budget(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    @property
    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)


# ---------------------------------------------------------------- responses


class ResponseFunctionCall(BaseModel):
    name: str
    arguments: str


class ResponseToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: ResponseFunctionCall


class ResponseMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[ResponseToolCall] | None = None


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChoiceLogprobs(BaseModel):
    """OpenAI's choices[].logprobs of chat completions."""

    content: list[TokenLogprob] | None = None
    refusal: list[TokenLogprob] | None = None


class Choice(BaseModel):
    index: int = 0
    message: ResponseMessage
    finish_reason: str
    logprobs: ChoiceLogprobs | None = None


class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0


class CompletionUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails = Field(default_factory=PromptTokensDetails)


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: CompletionUsage
    system_fingerprint: str | None = None


class DeltaFunctionCall(BaseModel):
    name: str | None = None
    arguments: str | None = None


class DeltaToolCall(BaseModel):
    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: DeltaFunctionCall


class Delta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[DeltaToolCall] | None = None


class ChunkChoice(BaseModel):
    index: int = 0
    delta: Delta
    finish_reason: str | None = None
    logprobs: ChoiceLogprobs | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: CompletionUsage | None = None
    system_fingerprint: str | None = None


class Model(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "macaron"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Model]


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """OpenAI's error envelope."""

    error: ErrorBody


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def now() -> int:
    return int(time.time())
