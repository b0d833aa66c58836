"""Continuous batching: mixed adapters, staggered arrivals, chunked prefill, preemption, seeds."""

from __future__ import annotations

import pytest

from macaron.engine import GenerateRequest, SamplingParams
from macaron.engine.protocol import InvalidRequestError

from .helpers import PROMPTS, greedy, make_engine, run_all

ADAPTERS = [None, "chat", "agent", "code", "ui"]


def _requests(tag: str, params: SamplingParams) -> list[GenerateRequest]:
    return [
        GenerateRequest(rid=f"{tag}-{a}-{i}", prompt=p, sampling=params, lora_path=a)
        for i, p in enumerate(PROMPTS)
        for a in ADAPTERS
    ]


def _alone(engine, requests: list[GenerateRequest]) -> dict[str, list[int]]:
    out = {}
    for r in requests:
        out[r.rid.split("-", 1)[1]] = run_all(engine, [r])[r.rid].output_ids
    return out


def test_mixed_batch_with_staggered_arrivals_equals_alone(engine):
    params = greedy(12, ignore_eos=True)
    alone = _alone(engine, _requests("alone", params))
    batched = run_all(engine, _requests("batch", params), stagger=2)
    assert {k.split("-", 1)[1]: v.output_ids for k, v in batched.items()} == alone
    # every request ended: no block is held by one any more (cached prefixes stay, unreferenced)
    assert not engine.block_manager.used_block_ids
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks


def test_seeded_sampling_is_the_same_alone_and_in_a_batch(engine):
    # the tiny model's logits are spread by hundreds: temperature 100 gives varied samples
    params = SamplingParams(temperature=100.0, top_p=0.9, top_k=50, max_new_tokens=10, sampling_seed=1234, ignore_eos=True)
    plain = SamplingParams(temperature=100.0, max_new_tokens=10, sampling_seed=99, ignore_eos=True)
    reqs = _requests("s", params)[:5] + _requests("p", plain)[5:10]
    alone = _alone(engine, reqs)
    filler = [
        GenerateRequest(rid=f"f-{i}", prompt=PROMPTS[i % 4], sampling=SamplingParams(temperature=100.0, max_new_tokens=10))
        for i in range(6)
    ]
    batched = run_all(engine, filler[:3] + reqs + filler[3:], stagger=1)
    assert {k.split("-", 1)[1]: v.output_ids for k, v in batched.items() if not k.startswith("f-")} == alone
    # and the samples do vary between seeds
    other = SamplingParams(**{**params.model_dump(), "sampling_seed": 7})
    r = GenerateRequest(rid="o", prompt=PROMPTS[0], sampling=other)
    assert run_all(engine, [r])["o"].output_ids != alone[f"{None}-0"]


@pytest.mark.parametrize("chunk, block, kv_factor, kv_extra", [(16, 8, 3, 200), (11, 8, 2, 24)])
def test_chunked_prefill_and_preemption_give_the_same_tokens(tiny_assets, engine, chunk, block, kv_factor, kv_extra):
    long_prompt = " ".join(PROMPTS) * 3
    reqs = [
        GenerateRequest(rid=f"x-{a}", prompt=long_prompt, sampling=greedy(24, ignore_eos=True), lora_path=a)
        for a in ADAPTERS
    ]
    expected = {r.rid: run_all(engine, [r])[r.rid].output_ids for r in reqs}
    # small prefill chunks (11 tokens: chunk ends fall inside 8-token blocks), and so little KV
    # cache that decoding must preempt and recompute
    small = make_engine(
        tiny_assets.model_dir,
        dict(tiny_assets.adapters),
        chunked_prefill_size=chunk,
        max_total_tokens=len(engine.tokenizer.encode(long_prompt)) * kv_factor + kv_extra,
        kv_block_size=block,
    )
    chunk_ends: set[int] = set()
    original = small.scheduler.schedule

    def schedule():
        step = original()
        chunk_ends.update((s.num_computed_tokens + n) % block for s, n in step.prefill)
        return step

    small.scheduler.schedule = schedule
    outs = run_all(small, reqs)
    assert {k: v.output_ids for k, v in outs.items()} == expected
    assert small.scheduler.num_preemptions > 0
    if chunk % block:
        assert chunk_ends - {0}, "some prefill chunk must end inside a KV block"


def test_adapter_cap_per_batch_pages_adapters_through_slots(tiny_assets, engine):
    eng = make_engine(tiny_assets.model_dir, dict(tiny_assets.adapters), max_loras_per_batch=2)
    reqs = [
        GenerateRequest(rid=f"c-{a}-{i}", prompt=p, sampling=greedy(8, ignore_eos=True), lora_path=a)
        for i, p in enumerate(PROMPTS[:2])
        for a in ADAPTERS
    ]
    expected = {r.rid: o.output_ids for r in reqs for o in run_all(engine, [r]).values()}
    for r in reqs:
        eng.add_request(r)
    seen_max, outs = 0, {}
    while eng.has_unfinished():
        outs.update({o.rid: o.output_ids for o in eng.step() if o.finished})
        adapters = {s.adapter.name for s in eng.scheduler.running if s.adapter is not None}
        seen_max = max(seen_max, len(adapters))
    assert seen_max == 2
    assert outs == expected  # slots were reused by other adapters (LRU) without mixing weights up


def test_adapter_limits(tiny_assets, qwen_assets):
    adapters = dict(tiny_assets.adapters)
    with pytest.raises(InvalidRequestError, match="max_loaded_loras"):
        make_engine(tiny_assets.model_dir, adapters, max_loaded_loras=3)
    with pytest.raises(InvalidRequestError, match="max_lora_rank 4"):
        make_engine(tiny_assets.model_dir, adapters, max_lora_rank=4)
    with pytest.raises(InvalidRequestError, match="not in lora_target_modules"):
        make_engine(tiny_assets.model_dir, adapters, lora_target_modules=["q_proj", "v_proj"])
    with pytest.raises(InvalidRequestError, match="trained on another base"):
        make_engine(tiny_assets.model_dir, {"qwen": qwen_assets["mlp"]})  # intermediate 128 vs 192
    eng = make_engine(qwen_assets["model"], {"qv": qwen_assets["qv"]}, max_lora_rank=16, lora_target_modules=["q_proj", "v_proj"])
    assert set(eng.lora.adapters) == {"qv"}
