"""Start-up refusals (devices, model configs the engine would run wrong), pinned adapters, the
engine thread's idle wait, preparation off the event loop, and the first-token stamp."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import torch

from macaron.engine import AsyncLLMEngine, EngineArgs, GenerateRequest, LLMEngine
from macaron.engine.engine import resolve_device
from macaron.engine.models.llama import ModelShape
from macaron.engine.protocol import InvalidRequestError

from .helpers import PROMPTS, greedy, make_engine

LLAMA = {
    "architectures": ["LlamaForCausalLM"], "vocab_size": 100, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 8192,
}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_cuda_without_a_gpu_is_refused_at_start_with_what_to_do(tiny_assets):
    with pytest.raises(ValueError, match="sees no CUDA device; set device to cpu"):
        LLMEngine(EngineArgs(model_path=str(tiny_assets.model_dir), device="cuda"))


@pytest.mark.parametrize("name, message", [("mps", "runs on cpu or cuda only"), ("nonsense", "is not a torch device")])
def test_other_devices_are_refused(name, message):
    with pytest.raises(ValueError, match=message):
        resolve_device(name)
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"architectures": ["MistralForCausalLM"], "sliding_window": 4096}, "sliding_window=4096"),
        ({"architectures": ["Qwen2ForCausalLM"], "use_sliding_window": True, "sliding_window": 1024}, "sliding_window=1024"),
        ({"rope_scaling": {"type": "dynamic", "factor": 2.0}}, "rope scaling type 'dynamic'"),
        ({"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}}, "'longrope'"),
    ],
)
def test_configs_the_engine_would_run_wrong_are_refused(extra, message):
    with pytest.raises(ValueError, match=message):
        ModelShape.from_config({**LLAMA, **extra})


def test_static_rope_scaling_and_unused_windows_are_accepted():
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 8192}
    assert ModelShape.from_config({**LLAMA, "rope_scaling": llama3}).num_layers == 2
    # Qwen2 ships a sliding_window it does not use; Mistral with a window as long as the context
    assert ModelShape.from_config({**LLAMA, "architectures": ["Qwen2ForCausalLM"], "sliding_window": 4096, "use_sliding_window": False})
    assert ModelShape.from_config({**LLAMA, "architectures": ["MistralForCausalLM"], "sliding_window": None})


def test_pinned_adapters_are_capped_at_slots_minus_one(tiny_assets):
    eng = make_engine(tiny_assets.model_dir, {}, max_loras_per_batch=3)
    eng.load_adapter("chat", str(tiny_assets.adapters["chat"]), pinned=True)
    eng.load_adapter("agent", str(tiny_assets.adapters["agent"]), pinned=True)
    with pytest.raises(InvalidRequestError, match="at most 2 may be pinned"):
        eng.load_adapter("code", str(tiny_assets.adapters["code"]), pinned=True)
    eng.load_adapter("code", str(tiny_assets.adapters["code"]))  # unpinned is fine
    assert eng.unload_adapter("chat")
    eng.load_adapter("ui", str(tiny_assets.adapters["ui"]), pinned=True)  # room again after an unload


async def test_engine_thread_waits_instead_of_spinning_when_nothing_can_run(tiny_assets):
    """Every slot held by pinned adapters (forced past the check): the queued request cannot run,
    and the engine thread must sleep between wake-ups rather than call step() in a tight loop."""
    eng = make_engine(tiny_assets.model_dir, dict(tiny_assets.adapters), max_loras_per_batch=2)
    for name in ("chat", "agent"):
        eng.lora.adapters[name].pinned = True
        eng.lora.pool.acquire(eng.lora.adapters[name])
    calls = 0
    step = eng.step

    def counting_step():
        nonlocal calls
        calls += 1
        return step()

    eng.step = counting_step
    aeng = AsyncLLMEngine(eng)
    await aeng.start()
    try:
        aeng.submit(GenerateRequest(rid="starved", prompt=PROMPTS[0], sampling=greedy(2), lora_path="code"))
        await asyncio.sleep(0.5)
        assert eng.last_step_idle and eng.scheduler.waiting
        assert calls < 40, f"{calls} step() calls in 0.5 s: the engine thread is spinning"
    finally:
        await aeng.shutdown()


async def test_inputs_are_prepared_off_the_event_loop_and_rids_held_meanwhile(engine):
    aeng = AsyncLLMEngine(engine)
    await aeng.start()
    threads: list[str] = []
    process = engine.inputs.process
    release = threading.Event()

    def slow_process(request):
        threads.append(threading.current_thread().name)
        release.wait(5)  # stands for a long tokenisation or a new JSON schema compiling
        return process(request)

    engine.inputs.process = slow_process
    try:
        schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
        first = asyncio.create_task(
            aeng.submit_async(GenerateRequest(rid="js", prompt="x", sampling=greedy(20, json_schema=schema)))
        )
        await asyncio.sleep(0.05)
        ticks = 0
        for _ in range(5):  # the loop keeps running while the request is prepared
            await asyncio.sleep(0.01)
            ticks += 1
        assert ticks == 5 and not first.done()
        with pytest.raises(InvalidRequestError, match="already running"):
            await aeng.submit_async(GenerateRequest(rid="js", prompt="y"))
        assert aeng.stats().num_queued == 1
        release.set()
        outs = [o async for o in await first]
        assert outs[-1].finished and outs[-1].completion_tokens > 0
        assert threads and all(name.startswith("macaron-inputs") for name in threads)
    finally:
        engine.inputs.process = process
        release.set()
        await aeng.shutdown()


async def test_first_token_is_stamped_on_the_request_even_when_not_streaming(engine):
    aeng = AsyncLLMEngine(engine)
    await aeng.start()
    try:
        t0 = time.monotonic()
        out = await aeng.generate(GenerateRequest(rid="ttft", prompt=PROMPTS[0], sampling=greedy(40, ignore_eos=True)))
        assert out.completion_tokens == 40
        assert 0 < out.first_token_latency < out.e2e_latency <= time.monotonic() - t0
        # 39 more decode steps came after the first token: it cannot be the whole latency
        assert out.first_token_latency < out.e2e_latency * 0.9
    finally:
        await aeng.shutdown()
