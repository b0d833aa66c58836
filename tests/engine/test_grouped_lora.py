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
from macaron.engine.models.llama import LORA_MODULES, PROJECTIONS, ModelShape

from .helpers import PROMPTS, greedy, logits_and_tokens, make_engine, run_all

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
    """Every projection, fused shrink and one shrink per module, host slots and the stacked pool:
    bit for bit the per-row, per-module reference, including an adapter that targets part of a fused
    projection (q and v, not k) and one whose rank differs by module (rank_pattern)."""
    adapters = [
        _int_adapter("r4", 4, ("q_proj", "down_proj", "gate_proj", "up_proj"), 1),
        _int_adapter("r8", 8, ("q_proj", "v_proj", "o_proj"), 2),
        _int_adapter("r16", 16, LORA_MODULES, 3),
        _int_adapter("mixed-ranks", 4, ("k_proj",), 5),
    ]
    rank2 = _int_adapter("rank2", 2, ("q_proj",), 6)  # q at rank 2 next to k at rank 4, as rank_pattern makes
    adapters[3].weights.update(rank2.weights)
    adapters[3].target_modules = frozenset(("k_proj", "q_proj"))
    references = {(i, key): tuple(t.clone() for t in w) for i, ad in enumerate(adapters) for key, w in ad.weights.items()}
    row_slots = [0, 0, 1, -1, -1, 2, 2, 2, 0, -1, 3, 3]  # runs as a batch would have them, base rows between
    gen = torch.Generator().manual_seed(7)
    for stacked in (False, True):
        for fused_shrink in (True, False):
            pool = LoRAPool(SHAPE, 4, torch.float32, torch.device("cpu"), stacked=stacked, fused_shrink=fused_shrink)
            for adapter in adapters:
                adapter.slot = -1  # a fresh pool: page every adapter in
                assert pool.acquire(adapter) >= 0
            ctx = _ctx(row_slots)
            for projection, modules in PROJECTIONS.items():
                in_f = SHAPE.in_out(modules[0])[0]
                columns = SHAPE.columns(projection)
                width = max(end for _, end in columns.values())
                x = torch.randint(-4, 5, (len(row_slots), in_f), generator=gen).float()
                base = torch.randint(-9, 10, (len(row_slots), width), generator=gen).float()
                out = base.clone()
                lora_delta(pool, projection, 1, x, out, ctx)
                expected = base.clone()
                for i, slot in enumerate(row_slots):
                    for m in modules:
                        if slot >= 0 and (slot, (1, m)) in references:
                            a, bt = references[(slot, (1, m))]
                            first, end = columns[m]
                            expected[i, first:end] += (x[i : i + 1].double() @ a.double().t() @ bt.double()).float()[0]
                assert torch.equal(out, expected), (stacked, fused_shrink, projection)
                base_rows = [i for i, s in enumerate(row_slots) if s < 0]
                assert torch.equal(out[base_rows], base[base_rows])  # base rows pay nothing and get nothing


def test_fused_adapter_holds_its_weights_once():
    """Fusing stacks each projection's A once; `weights` then views it: same values, same bytes."""
    adapter = _int_adapter("r8", 8, LORA_MODULES, 4)
    before = {k: (a.clone(), bt.clone()) for k, (a, bt) in adapter.weights.items()}
    nbytes = adapter.nbytes
    fused = adapter.fused(SHAPE)
    assert adapter.nbytes == nbytes
    for key, (a, bt) in adapter.weights.items():
        assert torch.equal(a, before[key][0]) and torch.equal(bt, before[key][1])
    qkv = fused[(0, "qkv")]
    assert qkv.a_t.shape == (SHAPE.hidden_size, 3 * 8) and qkv.a_t.is_contiguous()
    assert adapter.weights[(0, "k_proj")][0].untyped_storage().data_ptr() == qkv.a_t.untyped_storage().data_ptr()
    assert sum(t.nbytes for t in {id(s.a_t): s.a_t for s in fused.values()}.values()) == sum(
        a.nbytes for a, _ in adapter.weights.values()
    )


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


def test_fused_shrink_matches_one_shrink_per_module(qwen_assets):
    """The engine's logits with one shrink per projection equal those with one shrink per module (the
    path before), in one batch mixing base rows, an adapter on q/v only (part of the fused q/k/v) and
    one on the MLP, on the packed host slots and on the stacked pool."""
    adapters = {"qv": qwen_assets["qv"], "mlp": qwen_assets["mlp"]}
    eng = make_engine(qwen_assets["model"], adapters)
    rows = [None, "qv", "mlp", "qv", "mlp", None, "qv", "mlp"]
    for stacked in (False, True):
        if stacked:
            pool = LoRAPool(eng.runner.shape, eng.lora.pool.num_slots, eng.dtype, eng.device, stacked=True)
            eng.lora.pool = eng.scheduler.pool = pool
            for adapter in eng.lora.adapters.values():
                adapter.slot = -1  # page them into the new pool
        eng.lora.pool.fused_shrink = True
        got_logits, got_tokens = logits_and_tokens(eng, PROMPTS * 2, rows)
        eng.lora.pool.fused_shrink = False
        want_logits, want_tokens = logits_and_tokens(eng, PROMPTS * 2, rows)
        assert sum(bool(f) for f in eng.lora.pool.slot_fused) == 2  # both adapters were paged in and read
        assert got_tokens == want_tokens
        assert len(got_logits) == len(want_logits) > 0
        for got, want in zip(got_logits, want_logits):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-5 * want.abs().max().item())
    # same prompt, adapter vs base: the deltas were not zero
    assert got_tokens["r1"] != got_tokens["r5"] and got_tokens["r0"] != got_tokens["r4"]
