"""Grouped LoRA: each run of rows multiplies by its own adapter at its own rank; base rows untouched.

Exactness uses integer-valued tensors, so every summation order gives the same float32 result and
`torch.equal` compares the grouped path with a per-row reference bit for bit. The stacked device
pool (what runs on an accelerator) is exercised on CPU too, and must give the same tokens.
"""

from __future__ import annotations

import torch

from macaron.engine import GenerateRequest
from macaron.engine.lora_adapter import LoRAAdapter
from macaron.engine.lora_manager import LoRAPool, pool_bytes
from macaron.engine.model_runner import lora_segments
from macaron.engine.models.layers import BatchContext, lora_delta
from macaron.engine.models.llama import ModelShape

from .helpers import PROMPTS, greedy, make_engine, run_all

SHAPE = ModelShape(
    architecture="LlamaForCausalLM", vocab_size=32, hidden_size=24, intermediate_size=40, num_layers=2,
    num_heads=4, num_kv_heads=2, head_dim=6, rms_norm_eps=1e-5, max_position_embeddings=64,
    tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
)


def _int_adapter(name: str, rank: int, modules: tuple[str, ...], seed: int) -> LoRAAdapter:
    g = torch.Generator().manual_seed(seed)
    weights = {}
    for layer in range(SHAPE.num_layers):
        for m in modules:
            in_f, out_f = SHAPE.in_out(m)
            a = torch.randint(-3, 4, (rank, in_f), generator=g).float()
            bt = torch.randint(-3, 4, (rank, out_f), generator=g).float()
            weights[(layer, m)] = (a, bt)
    return LoRAAdapter(name=name, path="-", rank=rank, target_modules=frozenset(modules), weights=weights)


def _ctx(row_slots: list[int]) -> BatchContext:
    n = len(row_slots)
    return BatchContext(
        positions=torch.zeros(n, dtype=torch.long), slot_mapping=torch.zeros(n, dtype=torch.long), num_decode=n,
        decode_kv_index=None, decode_mask=None, prefills=[], logits_index=torch.arange(n),
        lora_segments=lora_segments(row_slots) or None,
    )


def test_segments_are_runs_of_one_adapter_and_skip_base_rows():
    assert lora_segments([-1, 0, 0, 2, 2, 2, -1, 1]) == [(0, 1, 3), (2, 3, 6), (1, 7, 8)]
    assert lora_segments([-1, -1]) == []
    assert lora_segments([]) == []


def test_grouped_delta_equals_the_per_row_reference_exactly():
    adapters = [
        _int_adapter("r4", 4, ("q_proj", "down_proj"), 1),
        _int_adapter("r8", 8, ("q_proj",), 2),
        _int_adapter("r16", 16, ("q_proj", "down_proj"), 3),
    ]
    row_slots = [0, 0, 1, -1, -1, 2, 2, 2, 0, -1]  # runs as a batch would have them, base rows between
    for stacked in (False, True):
        pool = LoRAPool(SHAPE, 4, torch.float32, torch.device("cpu"), stacked=stacked)
        for adapter in adapters:
            adapter.slot = -1  # a fresh pool: page every adapter in
            assert pool.acquire(adapter) >= 0
        ctx = _ctx(row_slots)
        for module in ("q_proj", "down_proj"):
            in_f, out_f = SHAPE.in_out(module)
            x = torch.randint(-4, 5, (len(row_slots), in_f), generator=torch.Generator().manual_seed(7)).float()
            base = torch.randint(-9, 10, (len(row_slots), out_f), generator=torch.Generator().manual_seed(8)).float()
            out = base.clone()
            lora_delta(pool, module, 1, x, out, ctx)
            expected = base.clone()
            for i, slot in enumerate(row_slots):
                if slot >= 0 and (1, module) in adapters[slot].weights:
                    a, bt = adapters[slot].weights[(1, module)]
                    expected[i] += (x[i : i + 1].double() @ a.double().t() @ bt.double()).float()[0]
            assert torch.equal(out, expected), (stacked, module)
            base_rows = [i for i, s in enumerate(row_slots) if s < 0]
            assert torch.equal(out[base_rows], base[base_rows])  # base rows pay nothing and get nothing


def test_stacked_pool_size_and_tokens_match_the_in_place_slots(tiny_assets, engine):
    """The accelerator layout (stacked copies, padded to the largest rank) on CPU: same tokens, and
    exactly the bytes the engine (and the planner) account for it."""
    eng = make_engine(tiny_assets.model_dir, dict(tiny_assets.adapters))
    shape = eng.runner.shape
    stacked = LoRAPool(shape, eng.lora.pool.num_slots, eng.dtype, eng.device, stacked=True)
    eng.lora.pool = eng.scheduler.pool = stacked
    names = [None, "chat", "agent", "code", "ui"]
    reqs = [GenerateRequest(rid=f"{a}-{i}", prompt=p, sampling=greedy(10), lora_path=a) for i, p in enumerate(PROMPTS) for a in names]
    expected = {k: v.output_ids for k, v in run_all(engine, reqs).items()}
    assert {k: v.output_ids for k, v in run_all(eng, reqs).items()} == expected
    assert engine.lora.pool.nbytes == 0  # on CPU the slots read the host copies: nothing held twice
    rank = max(a.rank for a in eng.lora.adapters.values())
    modules = frozenset().union(*(a.target_modules for a in eng.lora.adapters.values()))
    assert stacked.nbytes == pool_bytes(shape, stacked.num_slots, rank, modules, 4) == eng.lora.device_pool_bytes()
    mem = eng.memory_usage()
    assert mem.adapter_pool_bytes == stacked.nbytes and mem.adapter_pool_bytes_on_accelerator == stacked.nbytes
    assert mem.adapter_host_bytes == sum(mem.adapter_bytes.values()) > 0
    assert mem.total_bytes == mem.base_weight_bytes + mem.adapter_host_bytes + mem.adapter_pool_bytes + mem.kv_cache_bytes
