"""One request through a specialist: render, check, pick a replica, stream from the engine, post-process.

Yields domain events (`RouteInfo` first, then `TextDelta` / `ToolCallDeltas` / `Logprobs`, then `Done`) and raises
domain errors (`errors.py`); it knows nothing of gRPC. Cancelling the consumer closes the engine
stream, and the engine client then aborts the engine request.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from typing import Any, AsyncIterator

from opentelemetry import trace

from macaron import telemetry
from macaron.engine_client import (
    AsyncEngineClient,
    EngineBadRequestError,
    EngineClientError,
    EngineOverloadedError,
    EngineTimeoutError,
    EngineUnavailableError,
    StreamChunk,
)
from macaron.prompting import ChatRequest, render, render_key
from macaron.specialist.errors import (
    BadRequestError,
    DeadlineExceededError,
    OverloadedError,
    UnavailableError,
)
from macaron.specialist.events import Done, Event, RouteInfo, TextDelta, Usage
from macaron.specialist.finish import from_sglang
from macaron.specialist.logprobs import TokenBytes
from macaron.specialist.postprocess import finish_output
from macaron.specialist.profiles import OutputPlan, Profile, plan_output
from macaron.specialist.replicas import ReplicaPicker
from macaron.specialist.sampling import SamplingRequest, resolve_sampling
from macaron.specialist.settings import SpecialistsSettings
from macaron.specialist.tool_stream import CallStreamer

log = logging.getLogger(__name__)

CONTEXT_PROBE_TIMEOUT_S = 3.0




class EnginePool:
    """One engine client per replica URL, created on first use."""

    def __init__(self, max_retries: int = 2, api_key: str | None = None) -> None:
        self._clients: dict[str, AsyncEngineClient] = {}
        self._max_retries = max_retries
        self._api_key = api_key

    def client(self, url: str) -> AsyncEngineClient:
        if url not in self._clients:
            self._clients[url] = AsyncEngineClient(url, max_retries=self._max_retries, api_key=self._api_key)
        return self._clients[url]

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()


class Pipeline:
    """Serves one profile: the whole request path below the servicer."""

    def __init__(
        self,
        profile: Profile,
        settings: SpecialistsSettings,
        tokenizer: Any,
        picker: ReplicaPicker,
        engines: EnginePool | None = None,
    ) -> None:
        self.profile = profile
        self.settings = settings
        self.tokenizer = tokenizer
        self.picker = picker
        self.engines = engines or EnginePool()
        self.active = 0
        self._context_length: int | None = profile.settings.context_length
        self.token_bytes = TokenBytes(tokenizer)
        self.render_key = render_key(profile, tokenizer)
        """What this profile's prompts are rendered and tokenized with: a router's ids under the same key are used."""
        self._vocab_size = len(tokenizer) if self.render_key is not None else 0

    async def context_length(self) -> int:
        """The profile's limit, else the engine's (/v1/models max_model_len), else the tokenizer's."""
        if self._context_length is not None:
            return self._context_length
        try:
            url = await self.picker.pick()
            cards = await self.engines.client(url).list_models(timeout=CONTEXT_PROBE_TIMEOUT_S)
            lengths = [c.max_model_len for c in cards if c.parent is None and c.max_model_len]
            if lengths:
                self._context_length = int(lengths[0])
                return self._context_length
        except (EngineClientError, UnavailableError) as exc:
            log.info("engine context length unknown (%s); using the tokenizer's", exc)
        fallback = int(getattr(self.tokenizer, "model_max_length", 0) or 0)
        if 0 < fallback < 10**8:
            return fallback
        raise UnavailableError("the context length is unknown: the engine does not answer and no limit is configured")

    def prompt_ids(self, request: ChatRequest) -> list[int]:
        """The rendered prompt's token ids (no special tokens added: the template has them)."""
        text = render(request, self.profile, self.tokenizer)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def routed_ids(self, ids: Sequence[int], key: str) -> list[int] | None:
        """The router's token ids of this request's prompt, when it rendered them as this profile does (the same
        render key) and every id is in the vocabulary; None otherwise (the prompt is rendered here)."""
        if not ids or not key or key != self.render_key:
            return None
        routed = list(ids)
        return routed if max(routed) < self._vocab_size else None

    async def run(
        self,
        request: ChatRequest,
        sampling: SamplingRequest,
        *,
        request_id: str,
        replica_hint: str | None = None,
        timeout_s: float | None = None,
        adapter_version: str | None = None,
        logprobs: int | None = None,
        prompt_ids: list[int] | None = None,
    ) -> AsyncIterator[Event]:
        """The events of one generation; raises a SpecialistError subclass on failure.

        `adapter_version` is the version the router chose (a session keeps its own); None serves
        the profile's configured version. `logprobs`: None for none, else how many top alternatives
        per token (0 to 20), as SGLang's return_logprob / top_logprobs_num. `prompt_ids`: the request's prompt
        already rendered and tokenized under this profile (`routed_ids`); None renders it here."""
        if self.active >= self.settings.max_concurrent_streams:
            raise OverloadedError(
                f"specialist {self.profile.name} is serving its maximum of {self.settings.max_concurrent_streams} streams",
                retry_after_s=self.settings.retry_after_ms / 1000,
            )
        self.active += 1
        try:
            async for event in self._run(request, sampling, request_id, replica_hint, timeout_s, adapter_version,
                                         logprobs, prompt_ids):
                yield event
        finally:
            self.active -= 1

    async def _run(
        self,
        request: ChatRequest,
        sampling: SamplingRequest,
        request_id: str,
        replica_hint: str | None,
        timeout_s: float | None,
        adapter_version: str | None = None,
        logprobs: int | None = None,
        prompt_ids: list[int] | None = None,
    ) -> AsyncIterator[Event]:
        s = self.profile.settings
        version = (s.adapter_version or "") if adapter_version is None else adapter_version
        lora_path = f"{s.adapter}@{version}" if version else s.adapter
        plan = plan_output(request, self.profile)
        # the router's rendering when it handed it on; else render here (long prompts: off the loop)
        ids = prompt_ids if prompt_ids else await asyncio.to_thread(self.prompt_ids, request)
        params = resolve_sampling(
            sampling, self.profile.settings, prompt_tokens=len(ids), context_length=await self.context_length()
        )
        if plan.schema is not None:
            params["json_schema"] = plan.json_schema
        own_stop = None
        if plan.mode == "tools" and not request.parallel_tool_calls and self.profile.parser is not None:
            # one call at most: the engine stops at the end of the first call (SGLang and ours alike)
            own_stop = self.profile.parser.end
            if own_stop not in params.get("stop", []):
                params["stop"] = [*params.get("stop", []), own_stop]
            else:
                own_stop = None  # the caller's own stop string: reported as theirs
        extra = ({"return_logprob": True, "top_logprobs_num": logprobs, "logprob_start_len": -1}
                 if logprobs is not None else None)
        timeout = min(timeout_s, self.settings.default_timeout_s) if timeout_s else self.settings.default_timeout_s
        deadline = asyncio.get_running_loop().time() + timeout
        tried: set[str] = set()
        while True:
            url = await self.picker.pick(replica_hint, exclude=frozenset(tried))
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise DeadlineExceededError("the deadline passed before the engine answered")
            stream = self.engines.client(url).generate_stream(
                input_ids=ids,
                sampling_params=params,
                lora_path=lora_path,
                rid=f"{request_id}-{uuid.uuid4().hex[:8]}",
                timeout=remaining,
                extra_body=extra,
            )
            started = False
            # the engine hop's span (client side: the engine is SGLang's or ours, spans or not)
            span = telemetry.tracer(__name__).start_span("engine.generate", kind=trace.SpanKind.CLIENT, attributes={
                "engine.url": url, "adapter.lora_path": lora_path, "adapter.version": version})
            try:
                with self.picker.track(url):
                    async for event in self._consume(stream, url, request, plan, params, version, own_stop):
                        started = True
                        if isinstance(event, Done):
                            span.set_attribute("usage.prompt_tokens", event.usage.prompt_tokens)
                            span.set_attribute("usage.completion_tokens", event.usage.completion_tokens)
                            span.set_attribute("usage.cached_tokens", event.usage.cached_tokens)
                        yield event
                return
            except EngineUnavailableError as exc:
                if started or not exc.retryable:
                    raise UnavailableError(f"engine replica {url} failed: {exc.message}") from exc
                self.picker.mark_down(url)
                tried.add(url)
                log.warning("engine replica %s unreachable (%s); trying another", url, exc.message)
                if replica_hint:
                    replica_hint = None  # the hinted replica is down: fall back to the least loaded
            except EngineBadRequestError as exc:
                raise BadRequestError(f"the engine refused the request: {exc.message}") from exc
            except EngineOverloadedError as exc:
                raise OverloadedError(
                    f"the engine is overloaded: {exc.message}", retry_after_s=self.settings.retry_after_ms / 1000
                ) from exc
            except EngineTimeoutError as exc:
                raise DeadlineExceededError(f"the engine did not finish before the deadline: {exc.message}") from exc
            except EngineClientError as exc:
                raise UnavailableError(f"engine replica {url} failed: {exc.message}") from exc
            finally:
                span.end()
                await stream.aclose()

    async def _consume(
        self, stream: AsyncIterator[StreamChunk], url: str, request: ChatRequest, plan: OutputPlan, params: dict[str, Any],
        version: str = "", own_stop: str | None = None,
    ) -> AsyncIterator[Event]:
        parser = self.profile.parser
        calls = None
        if plan.mode in ("tools", "forced_tool") and parser is not None:
            tools = request.tools
            if plan.mode == "forced_tool" and request.tool_choice.function_name:
                tools = tuple(t for t in tools if t.name == request.tool_choice.function_name)
            calls = CallStreamer(parser.start, parser.end, tools, in_call=plan.mode == "forced_tool")
        text, last = "", None
        async for chunk in stream:
            if last is None:  # the replica answered: announce the route (a failed attempt never is)
                yield RouteInfo(adapter=self.profile.settings.adapter, adapter_version=version, replica=url)
            text, last = chunk.text, chunk
            new_logprobs = chunk.delta_logprobs
            if new_logprobs:
                yield self.token_bytes.logprobs(new_logprobs)
            if plan.mode in ("text", "json") and chunk.delta:
                yield TextDelta(chunk.delta)
            elif calls is not None:
                for event in calls.feed(text):
                    yield event
            if chunk.finished:
                break
        if last is None or last.finish_reason is None:
            raise UnavailableError("the engine stream ended before the request finished")
        meta = last.meta_info
        usage = Usage(meta.prompt_tokens, meta.completion_tokens, meta.cached_tokens)
        finish = from_sglang(last.finish_reason.model_dump(exclude_none=True))
        if finish.reason == "abort":
            if plan.mode in ("forced_tool", "ui", "a2ui"):
                raise UnavailableError(f"the engine aborted the request: {finish.message or 'no reason given'}")
            yield Done(finish, usage)
            return
        if calls is not None:
            for event in calls.finish(text, cut=finish.reason == "length"):
                yield event
        for event in finish_output(text, finish, request, plan, self.profile, params["max_new_tokens"]):
            yield event
        raw_finish = last.finish_reason.model_dump(exclude_none=True)
        if own_stop is not None and raw_finish.get("matched") == own_stop:
            raw_finish.pop("matched")  # the stop that ends the one allowed call is not the caller's
        yield Done(from_sglang(raw_finish, tool_calls=bool(calls and calls.calls)), usage)
