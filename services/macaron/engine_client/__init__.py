"""Async client of the engine's HTTP API: SGLang's native API, served by the embedded engine or SGLang.

    async with AsyncEngineClient("http://127.0.0.1:30000") as engine:
        result = await engine.generate(text="Hi", sampling_params={"max_new_tokens": 16}, lora_path="chat")
        async for chunk in engine.generate_stream(text="Hi", lora_path="code", timeout=30):
            print(chunk.delta, end="")
"""

from macaron.engine_client._client import AsyncEngineClient, GenerateStream
from macaron.engine_client._exceptions import (
    EngineBadRequestError,
    EngineClientError,
    EngineOverloadedError,
    EngineStatusError,
    EngineTimeoutError,
    EngineUnavailableError,
)
from macaron.engine_client._types import (
    FinishReason,
    GenerateResult,
    LoRAUpdateResult,
    MetaInfo,
    ModelCard,
    ModelInfo,
    SamplingParamsDict,
    ServerInfo,
    StreamChunk,
    TokenLogprob,
)

__all__ = [
    "AsyncEngineClient",
    "EngineBadRequestError",
    "EngineClientError",
    "EngineOverloadedError",
    "EngineStatusError",
    "EngineTimeoutError",
    "EngineUnavailableError",
    "FinishReason",
    "GenerateResult",
    "GenerateStream",
    "LoRAUpdateResult",
    "MetaInfo",
    "ModelCard",
    "ModelInfo",
    "SamplingParamsDict",
    "ServerInfo",
    "StreamChunk",
    "TokenLogprob",
]
