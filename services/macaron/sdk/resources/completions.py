"""`client.completions`: plain-prompt completions (OpenAI's legacy /v1/completions) through the router.

The prompt reaches the chosen specialist's adapter as it is, without the chat template or the
profile's system prompt; `specialist="auto"` lets the router classify the prompt as a user turn.
Results are the chat resource's (`ChatResult`, `Stream`); tools do not apply.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal, overload

from macaron.sdk._convert import build_request
from macaron.sdk._streaming import AsyncStream, Stream
from macaron.sdk.resources.chat import SpecialistParam, generate, generate_async
from macaron.sdk.types import ChatResult, ResponseFormatParam

if TYPE_CHECKING:
    from macaron.sdk._client import AsyncMacaronClient, MacaronClient


class Completions:
    """Synchronous completions resource (`MacaronClient.completions`)."""

    def __init__(self, client: MacaronClient) -> None:
        self._client = client

    @overload
    def create(self, *, prompt: str, stream: Literal[False] = False, specialist: SpecialistParam = ...,
               session_id: str | None = ..., response_format: ResponseFormatParam | None = ...,
               max_tokens: int | None = ..., min_tokens: int | None = ..., temperature: float | None = ...,
               top_p: float | None = ..., top_k: int | None = ..., min_p: float | None = ...,
               frequency_penalty: float | None = ..., presence_penalty: float | None = ...,
               repetition_penalty: float | None = ..., stop: str | Sequence[str] | None = ..., seed: int | None = ...,
               logprobs: int | None = ..., request_id: str | None = ..., request_metadata: Mapping[str, str] | None = ...,
               timeout: float | None = ..., metadata: Mapping[str, str] | None = ...) -> ChatResult: ...

    @overload
    def create(self, *, prompt: str, stream: Literal[True], specialist: SpecialistParam = ...,
               session_id: str | None = ..., response_format: ResponseFormatParam | None = ...,
               max_tokens: int | None = ..., min_tokens: int | None = ..., temperature: float | None = ...,
               top_p: float | None = ..., top_k: int | None = ..., min_p: float | None = ...,
               frequency_penalty: float | None = ..., presence_penalty: float | None = ...,
               repetition_penalty: float | None = ..., stop: str | Sequence[str] | None = ..., seed: int | None = ...,
               logprobs: int | None = ..., request_id: str | None = ..., request_metadata: Mapping[str, str] | None = ...,
               timeout: float | None = ..., metadata: Mapping[str, str] | None = ...) -> Stream: ...

    def create(self, *, prompt: str, stream: bool = False, specialist: SpecialistParam = "auto",
               session_id: str | None = None, response_format: ResponseFormatParam | None = None,
               max_tokens: int | None = None, min_tokens: int | None = None, temperature: float | None = None,
               top_p: float | None = None, top_k: int | None = None, min_p: float | None = None,
               frequency_penalty: float | None = None, presence_penalty: float | None = None,
               repetition_penalty: float | None = None, stop: str | Sequence[str] | None = None,
               seed: int | None = None, logprobs: int | None = None, request_id: str | None = None,
               request_metadata: Mapping[str, str] | None = None, timeout: float | None = None,
               metadata: Mapping[str, str] | None = None) -> ChatResult | Stream:
        """Completes `prompt`: a ChatResult, or with `stream=True` a Stream. `logprobs` (0 to 20), as in
        OpenAI's completions, returns each token's log probability and that many alternatives."""
        c = self._client
        rid = c.new_request_id(request_id)
        request = build_request(
            prompt=prompt, specialist=specialist, session_id=session_id, request_id=rid,
            response_format=response_format, max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
            frequency_penalty=frequency_penalty, presence_penalty=presence_penalty, stop=stop, seed=seed,
            metadata=request_metadata, min_tokens=min_tokens, min_p=min_p, repetition_penalty=repetition_penalty,
            logprobs=logprobs is not None, top_logprobs=logprobs,
        )
        return generate(c, request, rid, stream=stream, timeout=timeout, metadata=metadata,
                        logprobs=logprobs is not None)


class AsyncCompletions:
    """asyncio completions resource (`AsyncMacaronClient.completions`)."""

    def __init__(self, client: AsyncMacaronClient) -> None:
        self._client = client

    @overload
    async def create(self, *, prompt: str, stream: Literal[False] = False, specialist: SpecialistParam = ...,
                     session_id: str | None = ..., response_format: ResponseFormatParam | None = ...,
                     max_tokens: int | None = ..., min_tokens: int | None = ..., temperature: float | None = ...,
                     top_p: float | None = ..., top_k: int | None = ..., min_p: float | None = ...,
                     frequency_penalty: float | None = ..., presence_penalty: float | None = ...,
                     repetition_penalty: float | None = ..., stop: str | Sequence[str] | None = ...,
                     seed: int | None = ..., logprobs: int | None = ..., request_id: str | None = ...,
                     request_metadata: Mapping[str, str] | None = ..., timeout: float | None = ...,
                     metadata: Mapping[str, str] | None = ...) -> ChatResult: ...

    @overload
    async def create(self, *, prompt: str, stream: Literal[True], specialist: SpecialistParam = ...,
                     session_id: str | None = ..., response_format: ResponseFormatParam | None = ...,
                     max_tokens: int | None = ..., min_tokens: int | None = ..., temperature: float | None = ...,
                     top_p: float | None = ..., top_k: int | None = ..., min_p: float | None = ...,
                     frequency_penalty: float | None = ..., presence_penalty: float | None = ...,
                     repetition_penalty: float | None = ..., stop: str | Sequence[str] | None = ...,
                     seed: int | None = ..., logprobs: int | None = ..., request_id: str | None = ...,
                     request_metadata: Mapping[str, str] | None = ..., timeout: float | None = ...,
                     metadata: Mapping[str, str] | None = ...) -> AsyncStream: ...

    async def create(self, *, prompt: str, stream: bool = False, specialist: SpecialistParam = "auto",
                     session_id: str | None = None, response_format: ResponseFormatParam | None = None,
                     max_tokens: int | None = None, min_tokens: int | None = None, temperature: float | None = None,
                     top_p: float | None = None, top_k: int | None = None, min_p: float | None = None,
                     frequency_penalty: float | None = None, presence_penalty: float | None = None,
                     repetition_penalty: float | None = None, stop: str | Sequence[str] | None = None,
                     seed: int | None = None, logprobs: int | None = None, request_id: str | None = None,
                     request_metadata: Mapping[str, str] | None = None, timeout: float | None = None,
                     metadata: Mapping[str, str] | None = None) -> ChatResult | AsyncStream:
        """Completes `prompt` (see Completions.create)."""
        c = self._client
        rid = c.new_request_id(request_id)
        request = build_request(
            prompt=prompt, specialist=specialist, session_id=session_id, request_id=rid,
            response_format=response_format, max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
            frequency_penalty=frequency_penalty, presence_penalty=presence_penalty, stop=stop, seed=seed,
            metadata=request_metadata, min_tokens=min_tokens, min_p=min_p, repetition_penalty=repetition_penalty,
            logprobs=logprobs is not None, top_logprobs=logprobs,
        )
        return await generate_async(c, request, rid, stream=stream, timeout=timeout, metadata=metadata,
                                    logprobs=logprobs is not None)
