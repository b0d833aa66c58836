"""CPU weight packing (oneDNN's blocked layout): the same tokens and logits as the plain weights,
the same weight bytes, and a tied embedding's packed head copy reported apart."""

from __future__ import annotations

import torch

from macaron.engine.models.layers import linear, pack_weight

from .helpers import PROMPTS, logits_and_tokens, make_engine


def test_linear_over_a_packed_weight_equals_f_linear_at_every_batch_size():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(300, 64, generator=g)
    b = torch.randn(300, generator=g)
    packed = pack_weight(w)
    assert packed.is_mkldnn, "float32 on CPU with oneDNN must pack"
    for rows in (1, 3, 16, 17, 100):
        x = torch.randn(rows, 64, generator=g)
        torch.testing.assert_close(linear(x, packed, b), torch.nn.functional.linear(x, w, b), rtol=1e-5, atol=1e-4)
    assert pack_weight(w.to(torch.float64)).dtype == torch.float64  # not packable: returned as is


def test_packed_engine_matches_plain_weights(qwen_assets):
    """Qwen2 with q/k/v biases, tied embeddings and two adapters: packed and plain engines agree."""
    adapters = {"qv": qwen_assets["qv"], "mlp": qwen_assets["mlp"]}
    packed = make_engine(qwen_assets["model"], adapters)
    plain = make_engine(qwen_assets["model"], adapters, cpu_weight_packing=False)
    assert all(layer.qkv.is_mkldnn and layer.down.is_mkldnn for layer in packed.runner.model.layers)
    assert packed.runner.model.lm_head.is_mkldnn and not plain.runner.model.lm_head.is_mkldnn
    prompts, names = PROMPTS, [None, "qv", "mlp", "qv"]
    got_logits, got_tokens = logits_and_tokens(packed, prompts, names)
    want_logits, want_tokens = logits_and_tokens(plain, prompts, names)
    assert got_tokens == want_tokens
    assert len(got_logits) == len(want_logits) > 0
    for got, want in zip(got_logits, want_logits):
        spread = want.abs().max().item()
        torch.testing.assert_close(got, want, rtol=0, atol=1e-4 * spread)
    mem, ref = packed.memory_usage(), plain.memory_usage()
    assert mem.base_weight_bytes == ref.base_weight_bytes
    embed = packed.runner.model.embed
    assert mem.packed_head_copy_bytes == embed.numel() * embed.element_size() > 0  # tied: a second copy
    assert ref.packed_head_copy_bytes == 0
    assert mem.total_bytes == ref.total_bytes + mem.packed_head_copy_bytes
