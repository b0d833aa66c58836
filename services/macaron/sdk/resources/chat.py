"""`client.chat`: `create` (Router.Generate, whole or streamed) and `classify` (Router.Classify).

`Chat` and `AsyncChat` are twins: same parameters, same results, one blocking, one awaitable.
Parameters follow OpenAI's chat API; `specialist` replaces `model` (`"auto"` lets the router
decide), and `session_id` names the conversation for stickiness and cache affinity.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

from macaron.sdk._convert import build_request, classification_from_proto
from macaron.sdk._exceptions import APIError
from macaron.sdk._streaming import AsyncStream, Stream
from macaron.sdk.types import (
    ChatResult,
    Classification,
    MessageParam,
    ResponseFormatParam,
    ToolChoiceParam,
    ToolParam,
)
from macaron.v1 import router_pb2

if TYPE_CHECKING:
    from macaron.sdk._client import AsyncMacaronClient, MacaronClient

SpecialistParam = Literal["auto", "chat", "agent", "code", "ui"]


def _no_chunks(request_id: str) -> APIError:
    import grpc

    return APIError("the router ended the stream without any chunk", code=grpc.StatusCode.INTERNAL, request_id=request_id)


def generate(c: MacaronClient, request: Any, rid: str, *, stream: bool, timeout: float | None,
             metadata: Mapping[str, str] | None, logprobs: bool) -> ChatResult | Stream:
    """Router.Generate with retries before the first chunk: a Stream, or its final result."""
    deadline, extra = c._options(timeout, metadata)
    call_metadata = c.request_metadata(rid, extra)

    def attempt(remaining: float) -> tuple[Any, Any]:
        call = c._stub.Generate(request, timeout=remaining, metadata=call_metadata)
        try:
            return call, next(call)
        except StopIteration:
            return call, None

    call, first = c._with_retries(attempt, timeout=deadline, max_retries=c.max_retries, request_id=rid)
    if first is None:
        raise _no_chunks(rid)
    result = Stream(call, first, rid, logprobs=logprobs)
    return result if stream else result.get_final_result()


async def generate_async(c: AsyncMacaronClient, request: Any, rid: str, *, stream: bool, timeout: float | None,
                         metadata: Mapping[str, str] | None, logprobs: bool) -> ChatResult | AsyncStream:
    """`generate` for the asyncio client."""
    deadline, extra = c._options(timeout, metadata)
    call_metadata = c.request_metadata(rid, extra)

    async def attempt(remaining: float) -> tuple[Any, Any]:
        import grpc

        call = c._stub.Generate(request, timeout=remaining, metadata=call_metadata)
        try:
            first = await call.read()
        except BaseException:
            call.cancel()
            raise
        return call, (None if first is grpc.aio.EOF else first)

    call, first = await c._with_retries(attempt, timeout=deadline, max_retries=c.max_retries, request_id=rid)
    if first is None:
        raise _no_chunks(rid)
    result = AsyncStream(call, first, rid, logprobs=logprobs)
    if stream:
        return result
    try:
        return await result.get_final_result()
    except BaseException:  # cancelled (the caller left) or failed: the router stops working on it
        await result.close()
        raise


class Chat:
    """Synchronous chat resource (`MacaronClient.chat`)."""

    def __init__(self, client: MacaronClient) -> None:
        self._client = client

    @overload
    def create(
        self,
        *,
        messages: Iterable[MessageParam],
        stream: Literal[False] = False,
        specialist: SpecialistParam = ...,
        session_id: str | None = ...,
        tools: Sequence[ToolParam] | None = ...,
        tool_choice: ToolChoiceParam | None = ...,
        response_format: ResponseFormatParam | None = ...,
        max_tokens: int | None = ...,
        min_tokens: int | None = ...,
        temperature: float | None = ...,
        top_p: float | None = ...,
        top_k: int | None = ...,
        min_p: float | None = ...,
        frequency_penalty: float | None = ...,
        presence_penalty: float | None = ...,
        repetition_penalty: float | None = ...,
        logprobs: bool | None = ...,
        top_logprobs: int | None = ...,
        parallel_tool_calls: bool | None = ...,
        stop: str | Sequence[str] | None = ...,
        seed: int | None = ...,
        request_id: str | None = ...,
        request_metadata: Mapping[str, str] | None = ...,
        timeout: float | None = ...,
        metadata: Mapping[str, str] | None = ...,
    ) -> ChatResult: ...

    @overload
    def create(
        self,
        *,
        messages: Iterable[MessageParam],
        stream: Literal[True],
        specialist: SpecialistParam = ...,
        session_id: str | None = ...,
        tools: Sequence[ToolParam] | None = ...,
        tool_choice: ToolChoiceParam | None = ...,
        response_format: ResponseFormatParam | None = ...,
        max_tokens: int | None = ...,
        min_tokens: int | None = ...,
        temperature: float | None = ...,
        top_p: float | None = ...,
        top_k: int | None = ...,
        min_p: float | None = ...,
        frequency_penalty: float | None = ...,
        presence_penalty: float | None = ...,
        repetition_penalty: float | None = ...,
        logprobs: bool | None = ...,
        top_logprobs: int | None = ...,
        parallel_tool_calls: bool | None = ...,
        stop: str | Sequence[str] | None = ...,
        seed: int | None = ...,
        request_id: str | None = ...,
        request_metadata: Mapping[str, str] | None = ...,
        timeout: float | None = ...,
        metadata: Mapping[str, str] | None = ...,
    ) -> Stream: ...

    def create(
        self,
        *,
        messages: Iterable[MessageParam],
        specialist: SpecialistParam = "auto",
        session_id: str | None = None,
        tools: Sequence[ToolParam] | None = None,
        tool_choice: ToolChoiceParam | None = None,
        response_format: ResponseFormatParam | None = None,
        max_tokens: int | None = None,
        min_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        min_p: float | None = None,
        frequency_penalty: float | None = None,
        presence_penalty: float | None = None,
        repetition_penalty: float | None = None,
        logprobs: bool | None = None,
        top_logprobs: int | None = None,
        parallel_tool_calls: bool | None = None,
        stop: str | Sequence[str] | None = None,
        seed: int | None = None,
        stream: bool = False,
        request_id: str | None = None,
        request_metadata: Mapping[str, str] | None = None,
        timeout: float | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> ChatResult | Stream:
        """Generates an answer: a ChatResult, or with `stream=True` a Stream of chunks.

        `request_metadata` travels in the request (logged by the router); `metadata` is extra
        gRPC call metadata. `timeout` (seconds) is the deadline of the whole call. `top_k`, `min_p`,
        `repetition_penalty` and `min_tokens` are the sampling extras vLLM's and SGLang's servers accept.
        `logprobs=True` returns each generated token's log probability (`top_logprobs`, 0 to 20, adds the
        most likely alternatives); `parallel_tool_calls=False` stops generation after the first tool call.
        """
        c = self._client
        rid = c.new_request_id(request_id)
        request = build_request(
            messages=messages, specialist=specialist, session_id=session_id, request_id=rid, tools=tools,
            tool_choice=tool_choice, response_format=response_format, max_tokens=max_tokens, temperature=temperature,
            top_p=top_p, top_k=top_k, frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
            stop=stop, seed=seed, metadata=request_metadata, min_tokens=min_tokens, min_p=min_p,
            repetition_penalty=repetition_penalty, logprobs=logprobs, top_logprobs=top_logprobs,
            parallel_tool_calls=parallel_tool_calls,
        )
        return generate(c, request, rid, stream=stream, timeout=timeout, metadata=metadata, logprobs=bool(logprobs))

    def classify(
        self,
        *,
        messages: Iterable[MessageParam],
        specialist: SpecialistParam = "auto",
        session_id: str | None = None,
        tools: Sequence[ToolParam] | None = None,
        tool_choice: ToolChoiceParam | None = None,
        response_format: ResponseFormatParam | None = None,
        request_id: str | None = None,
        timeout: float | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Classification:
        """The route Generate would take now, without generating (the session is read, not written)."""
        c = self._client
        rid = c.new_request_id(request_id)
        request = router_pb2.ClassifyRequest(
            request=build_request(
                messages=messages, specialist=specialist, session_id=session_id, request_id=rid, tools=tools,
                tool_choice=tool_choice, response_format=response_format,
            )
        )
        deadline, extra = c._options(timeout, metadata)
        call_metadata = c.request_metadata(rid, extra)
        reply = c._with_retries(
            lambda remaining: c._stub.Classify(request, timeout=remaining, metadata=call_metadata),
            timeout=deadline, max_retries=c.max_retries, request_id=rid,
        )
        return classification_from_proto(reply)


class AsyncChat:
    """asyncio chat resource (`AsyncMacaronClient.chat`)."""

    def __init__(self, client: AsyncMacaronClient) -> None:
        self._client = client

    @overload
    async def create(
        self,
        *,
        messages: Iterable[MessageParam],
        stream: Literal[False] = False,
        specialist: SpecialistParam = ...,
        session_id: str | None = ...,
        tools: Sequence[ToolParam] | None = ...,
        tool_choice: ToolChoiceParam | None = ...,
        response_format: ResponseFormatParam | None = ...,
        max_tokens: int | None = ...,
        min_tokens: int | None = ...,
        temperature: float | None = ...,
        top_p: float | None = ...,
        top_k: int | None = ...,
        min_p: float | None = ...,
        frequency_penalty: float | None = ...,
        presence_penalty: float | None = ...,
        repetition_penalty: float | None = ...,
        logprobs: bool | None = ...,
        top_logprobs: int | None = ...,
        parallel_tool_calls: bool | None = ...,
        stop: str | Sequence[str] | None = ...,
        seed: int | None = ...,
        request_id: str | None = ...,
        request_metadata: Mapping[str, str] | None = ...,
        timeout: float | None = ...,
        metadata: Mapping[str, str] | None = ...,
    ) -> ChatResult: ...

    @overload
    async def create(
        self,
        *,
        messages: Iterable[MessageParam],
        stream: Literal[True],
        specialist: SpecialistParam = ...,
        session_id: str | None = ...,
        tools: Sequence[ToolParam] | None = ...,
        tool_choice: ToolChoiceParam | None = ...,
        response_format: ResponseFormatParam | None = ...,
        max_tokens: int | None = ...,
        min_tokens: int | None = ...,
        temperature: float | None = ...,
        top_p: float | None = ...,
        top_k: int | None = ...,
        min_p: float | None = ...,
        frequency_penalty: float | None = ...,
        presence_penalty: float | None = ...,
        repetition_penalty: float | None = ...,
        logprobs: bool | None = ...,
        top_logprobs: int | None = ...,
        parallel_tool_calls: bool | None = ...,
        stop: str | Sequence[str] | None = ...,
        seed: int | None = ...,
        request_id: str | None = ...,
        request_metadata: Mapping[str, str] | None = ...,
        timeout: float | None = ...,
        metadata: Mapping[str, str] | None = ...,
    ) -> AsyncStream: ...

    async def create(
        self,
        *,
        messages: Iterable[MessageParam],
        specialist: SpecialistParam = "auto",
        session_id: str | None = None,
        tools: Sequence[ToolParam] | None = None,
        tool_choice: ToolChoiceParam | None = None,
        response_format: ResponseFormatParam | None = None,
        max_tokens: int | None = None,
        min_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        min_p: float | None = None,
        frequency_penalty: float | None = None,
        presence_penalty: float | None = None,
        repetition_penalty: float | None = None,
        logprobs: bool | None = None,
        top_logprobs: int | None = None,
        parallel_tool_calls: bool | None = None,
        stop: str | Sequence[str] | None = None,
        seed: int | None = None,
        stream: bool = False,
        request_id: str | None = None,
        request_metadata: Mapping[str, str] | None = None,
        timeout: float | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> ChatResult | AsyncStream:
        """Generates an answer: a ChatResult, or with `stream=True` an AsyncStream of chunks (see Chat.create)."""
        c = self._client
        rid = c.new_request_id(request_id)
        request = build_request(
            messages=messages, specialist=specialist, session_id=session_id, request_id=rid, tools=tools,
            tool_choice=tool_choice, response_format=response_format, max_tokens=max_tokens, temperature=temperature,
            top_p=top_p, top_k=top_k, frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
            stop=stop, seed=seed, metadata=request_metadata, min_tokens=min_tokens, min_p=min_p,
            repetition_penalty=repetition_penalty, logprobs=logprobs, top_logprobs=top_logprobs,
            parallel_tool_calls=parallel_tool_calls,
        )
        return await generate_async(c, request, rid, stream=stream, timeout=timeout, metadata=metadata,
                                    logprobs=bool(logprobs))

    async def classify(
        self,
        *,
        messages: Iterable[MessageParam],
        specialist: SpecialistParam = "auto",
        session_id: str | None = None,
        tools: Sequence[ToolParam] | None = None,
        tool_choice: ToolChoiceParam | None = None,
        response_format: ResponseFormatParam | None = None,
        request_id: str | None = None,
        timeout: float | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Classification:
        """The route Generate would take now, without generating (the session is read, not written)."""
        c = self._client
        rid = c.new_request_id(request_id)
        request = router_pb2.ClassifyRequest(
            request=build_request(
                messages=messages, specialist=specialist, session_id=session_id, request_id=rid, tools=tools,
                tool_choice=tool_choice, response_format=response_format,
            )
        )
        deadline, extra = c._options(timeout, metadata)
        call_metadata = c.request_metadata(rid, extra)

        async def attempt(remaining: float) -> Any:
            return await c._stub.Classify(request, timeout=remaining, metadata=call_metadata)

        reply = await c._with_retries(attempt, timeout=deadline, max_retries=c.max_retries, request_id=rid)
        return classification_from_proto(reply)
