"""Cascade attention: rows behind the same cached prefix read it once per group, and the result
equals attending over each row's whole context (the merge by log-sum-exp is exact); groups are
exact (same blocks); an engine batch with groups, loners and mixed adapters gives the same logits
as the per-row path and the same tokens as transformers."""

from __future__ import annotations

import torch

from macaron.engine import GenerateRequest
from macaron.engine.cascade import attend_cascade, shared_prefix_groups
from macaron.engine.contiguous_kv import ContiguousKV, attend_contiguous
from macaron.engine.models import layers

from .helpers import greedy, make_engine, run_all

LONG = "The quick brown fox jumps over the lazy dog. def add(a, b): return a + b. " * 6


def test_cascade_equals_attention_over_the_whole_context_gqa_and_empty_suffix():
    g = torch.Generator().manual_seed(0)
    heads, heads_kv, dim, prefix = 6, 2, 16, 70
    shared = torch.randn(2, heads_kv, prefix, dim, generator=g)
    lengths = [5, 0, 12, 5, 1]  # unequal suffixes, one empty
    suffixes = [torch.randn(2, heads_kv, n, dim, generator=g) for n in lengths]
    q = torch.randn(len(lengths), heads, dim, generator=g) * 3  # peaked softmaxes stress the merge
    got = attend_cascade(q, shared, suffixes, 0.25)
    for i, s in enumerate(suffixes):
        full = torch.cat([shared, s], dim=2)
        want = attend_contiguous(q[i], full[0], full[1], 0.25)
        torch.testing.assert_close(got[i], want, rtol=1e-5, atol=1e-6)
    # equal suffix lengths take the stacked path: the same answer
    same = [suffixes[0], suffixes[3]]
    got2 = attend_cascade(q[[0, 3]], shared, same, 0.25)
    torch.testing.assert_close(got2, got[[0, 3]], rtol=1e-5, atol=1e-6)
    # every suffix empty: attention over the prefix alone
    got3 = attend_cascade(q[:2], shared, [suffixes[1], suffixes[1]], 0.25)
    torch.testing.assert_close(got3[0], attend_contiguous(q[0], shared[0], shared[1], 0.25), rtol=1e-5, atol=1e-6)


def _row(row: int, blocks: list[int], pos: int) -> tuple[int, ContiguousKV, int]:
    return row, ContiguousKV(torch.empty(1, 2, 1, 1, 1), pos, blocks), pos


def test_groups_need_the_same_blocks_and_enough_of_them():
    bs = 16
    a = _row(0, [1, 2, 3, 4, 5, 6, 7, 40], 120)
    b = _row(1, [1, 2, 3, 4, 5, 6, 7, 41], 121)  # same prompt, own last block
    c = _row(2, [1, 2, 3, 4, 5, 6, 7, 42, 43], 130)
    other = _row(3, [8, 9, 10, 11, 12, 13, 14, 44], 120)  # another adapter: other blocks, same positions
    short = _row(4, [20, 21, 22], 40)
    short_twin = _row(5, [20, 21, 23], 40)  # shares 32 tokens only: under MIN_PREFIX
    groups, loners = shared_prefix_groups([a, other, b, short, c, short_twin], bs)
    assert len(groups) == 1
    (group,) = groups
    assert [m[0] for m in group.members] == [0, 1, 2] and group.rows.tolist() == [0, 1, 2]
    assert group.prefix_len == 7 * bs
    assert sorted(r for r, _, _ in loners) == [3, 4, 5]
    # the prefix never reaches past what a member has computed
    late = _row(6, [1, 2, 3, 4, 5, 6, 7, 45], 100)
    (group,), _ = shared_prefix_groups([a, late], bs)
    assert group.prefix_len == 100


def _capture_logits(eng) -> list[torch.Tensor]:
    rows: list[torch.Tensor] = []
    sample = eng.sampler.__call__

    def capture(logits, seqs):
        rows.append(logits.clone())
        return sample(logits, seqs)

    eng.sampler = capture
    return rows


def _batch(eng, new_tokens: int) -> list[GenerateRequest]:
    """Groups behind two cached prefixes (base and `code`), a row of another adapter on the same
    prompt (other blocks: a loner), and a long row on another prompt (a loner)."""
    tails = [" x = 1", "!", " SELECT * FROM users WHERE id = 7; print(add(2, 3)) and more", " json"]
    rows = [(LONG + t, a) for t in tails[:3] for a in (None, "code")]
    rows += [(LONG + tails[3], "ui"), ("Hello world! How are you today? " * 8, None)]
    return [
        GenerateRequest(rid=f"r{i}", prompt=p, sampling=greedy(new_tokens, ignore_eos=True), lora_path=a)
        for i, (p, a) in enumerate(rows)
    ]


def _run(eng, requests, new_tokens: int) -> tuple[list[torch.Tensor], dict[str, list[int]]]:
    # cache the shared prompt under each adapter first, so that the batch hits the prefix cache
    ids = eng.tokenizer.encode(LONG, add_special_tokens=False)
    run_all(eng, [GenerateRequest(rid=f"warm-{a}", prompt=ids, sampling=greedy(1), lora_path=a)
                  for a in (None, "code", "ui")])
    logits = _capture_logits(eng)
    return logits, {rid: o.output_ids for rid, o in run_all(eng, requests).items()}


def test_engine_batch_cascade_equals_per_row_path_and_transformers(tiny_assets, tiny_ref, monkeypatch):
    new_tokens = 10
    calls = {"groups": 0, "rows": 0}
    real = layers.attend_cascade

    def counting(q, prefix, suffixes, scale):
        calls["groups"] += 1
        calls["rows"] += q.shape[0]
        return real(q, prefix, suffixes, scale)

    monkeypatch.setattr(layers, "attend_cascade", counting)
    results = {}
    for on in (False, True):
        eng = make_engine(tiny_assets.model_dir, dict(tiny_assets.adapters), cascade_attention=on)
        results[on] = _run(eng, _batch(eng, new_tokens), new_tokens)
        if not on:
            assert calls["groups"] == 0
    assert calls["groups"] > 0, "the shared-prefix rows must have attended as groups"
    # two groups of three (base and code) per layer and decode step
    assert calls["rows"] == 3 * calls["groups"]
    plain, cascade = results[False][0], results[True][0]
    assert len(plain) == len(cascade)
    for a, b in zip(plain, cascade):
        assert a.shape == b.shape
        assert (a - b).abs().max() <= 1e-5 * a.abs().max()
    assert results[True][1] == results[False][1]
    for r in _batch(eng, new_tokens):
        ref = tiny_ref.greedy(r.lora_path, r.prompt, new_tokens)  # stops at EOS, the engine ignores it
        assert results[True][1][r.rid][: len(ref)] == ref, r.rid
