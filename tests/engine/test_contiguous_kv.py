"""Long-context rows attend over their contiguous K/V copies: same tokens and logits as
transformers and as the gather path, copies built mid-decode, budget honoured, dropped on exit;
long prompts write their copy while they prefill (later chunks read it in place, nothing is
gathered), and a copy's prefix-cache part is built from a sibling copy, from block runs, or
gathered when the blocks are scattered."""

from __future__ import annotations

import random

import torch

from macaron.engine import GenerateRequest
from macaron.engine.contiguous_kv import MAX_RUNS, MIN_CONTEXT, ContiguousKVStore, block_runs
from macaron.engine.models import layers

from .helpers import greedy, make_engine, run_all

LONG = "The quick brown fox jumps over the lazy dog. def add(a, b): return a + b. " * 6


def _run_tracking(eng, requests) -> tuple[dict[str, list[int]], int]:
    """Output ids per request, and the most bytes the copies held at once."""
    for r in requests:
        eng.add_request(r)
    outs, peak = {}, 0
    while eng.has_unfinished():
        for o in eng.step():
            if o.finished:
                outs[o.rid] = o.output_ids
        peak = max(peak, eng.memory_usage().kv_copy_bytes)
    return outs, peak


def test_long_decode_equals_transformers_and_copies_are_dropped(tiny_assets, tiny_ref):
    eng = make_engine(tiny_assets.model_dir, dict(tiny_assets.adapters))
    assert len(eng.tokenizer.encode(LONG)) >= MIN_CONTEXT
    requests = [GenerateRequest(rid=str(a), prompt=LONG, sampling=greedy(12), lora_path=a) for a in (None, "code")]
    outs, peak = _run_tracking(eng, requests)
    assert peak > 0, "long rows must have used contiguous copies"
    for a in (None, "code"):
        assert outs[str(a)] == tiny_ref.greedy(a, LONG, 12), a
    mem = eng.memory_usage()
    store = eng.runner.contiguous
    assert not store.copies and store.live_bytes == 0  # dropped when the rows finished,
    assert mem.kv_copy_bytes == store.nbytes <= mem.kv_copy_max_bytes  # their buffers kept as spares
    assert mem.kv_copy_max_bytes == store.max_bytes > 0
    assert mem.total_bytes == (
        mem.base_weight_bytes + mem.adapter_host_bytes + mem.adapter_pool_bytes + mem.kv_cache_bytes + mem.kv_copy_bytes
        + mem.packed_head_copy_bytes
    )


def test_copies_and_gathered_rows_in_one_batch_equal_the_gather_path(tiny_assets):
    """Short rows, long rows, rows that cross the threshold while decoding (their copy is built
    from the paged cache mid-decode) and, with a budget for about two copies, long rows left on
    the gather path: every token equals an engine that never copies."""
    gather_only = make_engine(tiny_assets.model_dir, dict(tiny_assets.adapters), decode_kv_copy_tokens=0)
    ids = gather_only.tokenizer.encode(LONG, add_special_tokens=False)
    prompts = [ids, ids[: MIN_CONTEXT - 6], ids[:20], ids[40:], ids[: MIN_CONTEXT - 2]]
    adapters = [None, "chat", "code", "ui", None]

    def requests(tag: str) -> list[GenerateRequest]:
        return [
            GenerateRequest(rid=f"{tag}-{i}", prompt=p, sampling=greedy(24, ignore_eos=True), lora_path=a)
            for i, (p, a) in enumerate(zip(prompts, adapters))
        ]

    expected = {k.split("-", 1)[1]: v.output_ids for k, v in run_all(gather_only, requests("g")).items()}
    assert gather_only.memory_usage().kv_copy_bytes == 0
    for budget in (None, 2 * 320):
        eng = make_engine(tiny_assets.model_dir, dict(tiny_assets.adapters), decode_kv_copy_tokens=budget)
        outs, peak = _run_tracking(eng, requests("c"))
        assert {k.split("-", 1)[1]: v for k, v in outs.items()} == expected, budget
        assert peak > 0
        if budget is not None:
            assert peak <= budget * eng.runner.contiguous.bytes_per_token
        assert eng.runner.contiguous.live_tokens == 0
        assert eng.runner.contiguous.tokens_held <= eng.runner.contiguous.budget_tokens


def test_logits_over_a_copy_match_the_gather_path(tiny_assets):
    """Not only the argmax: the sampled rows' logits agree to float32 rounding."""
    seen: dict[str, list[torch.Tensor]] = {}
    for name, budget in (("gather", 0), ("copy", None)):
        eng = make_engine(tiny_assets.model_dir, dict(tiny_assets.adapters), decode_kv_copy_tokens=budget)
        sample = eng.sampler.__call__
        rows: list[torch.Tensor] = []

        def capture(logits, seqs, rows=rows, sample=sample):
            rows.append(logits[0].clone())
            return sample(logits, seqs)

        eng.sampler = capture
        run_all(eng, [GenerateRequest(rid="l", prompt=LONG, sampling=greedy(8, ignore_eos=True), lora_path="agent")])
        seen[name] = rows
    a, b = torch.stack(seen["gather"]), torch.stack(seen["copy"])
    assert (a - b).abs().max() <= 1e-4 * a.abs().max()


def test_block_runs_merge_consecutive_slots_across_block_boundaries():
    # positions 3..7 in block 5, 8..15 in block 6 (consecutive slots), 16..19 in block 9
    assert block_runs([5, 6, 9], 3, 20, 8) == [(3, 43, 13), (16, 72, 4)]
    assert block_runs([2, 1], 0, 16, 8) == [(0, 16, 8), (8, 8, 8)]  # descending blocks: two runs
    assert block_runs([4], 5, 5, 8) == []


def _expected(caches, table: list[int], pos: int, bs: int) -> torch.Tensor:
    index = torch.tensor([table[p // bs] * bs + p % bs for p in range(pos)])
    return torch.stack([torch.stack([k[index].transpose(0, 1), v[index].transpose(0, 1)]) for k, v in caches])


def test_builds_from_runs_from_a_sibling_and_by_gather_equal_the_blocks():
    bs, layers_n, heads, dim = 8, 3, 2, 4
    g = torch.Generator().manual_seed(0)
    caches = [(torch.randn(128 * bs, heads, dim, generator=g), torch.randn(128 * bs, heads, dim, generator=g))
              for _ in range(layers_n)]
    store = ContiguousKVStore(num_layers=layers_n, num_kv_heads=heads, head_dim=dim, dtype=torch.float32,
                              device=torch.device("cpu"), budget_tokens=100_000, min_context=1)
    ascending = list(range(3, 15))
    first = store.acquire(1, 90, caches, ascending, bs)
    assert torch.equal(first.data[:, :, :, :90], _expected(caches, ascending, 90, bs))
    assert store.built_tokens == {"sibling": 0, "runs": 90, "gathered": 0}
    # another request on the same first 10 blocks (a prefix-cache hit), then blocks of its own
    shared = ascending[:10] + [40, 41]
    second = store.acquire(2, 92, caches, shared, bs)
    assert torch.equal(second.data[:, :, :, :92], _expected(caches, shared, 92, bs))
    assert store.built_tokens == {"sibling": 80, "runs": 90 + 12, "gathered": 0}
    # scattered blocks: more runs than MAX_RUNS, so one gather per layer
    scattered = list(range(16, 128, 2))
    random.Random(0).shuffle(scattered)
    assert len(block_runs(scattered, 0, 400, bs)) > MAX_RUNS
    third = store.acquire(3, 400, caches, scattered, bs)
    assert torch.equal(third.data[:, :, :, :400], _expected(caches, scattered, 400, bs))
    assert store.built_tokens["gathered"] == 400
    # a copy that fell out of step with its request is rebuilt, not reused
    assert store.acquire(1, 89, caches, ascending, bs) is not first


def _count_gathers(monkeypatch) -> list[int]:
    calls = [0]
    real = layers.gather

    def counting(cache, index):
        calls[0] += 1
        return real(cache, index)

    monkeypatch.setattr(layers, "gather", counting)
    return calls


def test_chunked_prefill_writes_the_copy_and_reads_it_in_place(tiny_assets, tiny_ref, monkeypatch):
    """13-token chunks (ends inside 16-token blocks): every chunk after the first attends over the
    request's copy, nothing is gathered or built, and tokens equal transformers and the gather path."""
    calls = _count_gathers(monkeypatch)
    gather_only = make_engine(tiny_assets.model_dir, dict(tiny_assets.adapters), decode_kv_copy_tokens=0,
                              chunked_prefill_size=13)
    req = GenerateRequest(rid="c", prompt=LONG, sampling=greedy(10), lora_path="chat")
    expected = run_all(gather_only, [req])["c"].output_ids
    assert calls[0] > 0  # the gather path gathers for every later chunk and every decode step
    calls[0] = 0
    eng = make_engine(tiny_assets.model_dir, dict(tiny_assets.adapters), chunked_prefill_size=13)
    assert run_all(eng, [GenerateRequest(rid="c", prompt=LONG, sampling=greedy(10), lora_path="chat")])["c"].output_ids \
        == expected == tiny_ref.greedy("chat", LONG, 10)
    assert calls[0] == 0
    assert eng.runner.contiguous.built_tokens == {"sibling": 0, "runs": 0, "gathered": 0}


def test_a_prefix_cache_hit_builds_its_copy_from_a_running_sibling(tiny_assets):
    gather_only = make_engine(tiny_assets.model_dir, dict(tiny_assets.adapters), decode_kv_copy_tokens=0)
    eng = make_engine(tiny_assets.model_dir, dict(tiny_assets.adapters))
    ids = eng.tokenizer.encode(LONG, add_special_tokens=False)
    prompts = [ids, ids[:-3] + ids[5:8]]  # the second shares all but the last block with the first

    def requests(tag):
        return [GenerateRequest(rid=f"{tag}{i}", prompt=p, sampling=greedy(16, ignore_eos=True), lora_path="code")
                for i, p in enumerate(prompts)]

    expected = [o.output_ids for o in run_all(gather_only, requests("g"), stagger=4).values()]
    outs = [o.output_ids for o in run_all(eng, requests("c"), stagger=4).values()]
    assert outs == expected
    built = eng.runner.contiguous.built_tokens
    assert built["sibling"] >= len(ids) // 16 * 16 - 16 and built["gathered"] == 0


def test_released_buffers_are_reused_within_the_budget():
    store = ContiguousKVStore(num_layers=1, num_kv_heads=1, head_dim=2, dtype=torch.float32,
                              device=torch.device("cpu"), budget_tokens=1000, min_context=1)
    caches = [(torch.randn(1024, 1, 2), torch.randn(1024, 1, 2))]
    first = store.acquire(1, 100, caches, list(range(30)), 4)
    buffer = first.data
    store.release(1)
    assert store.live_tokens == 0 and store.spare_tokens == buffer.shape[3]
    again = store.acquire(2, 90, caches, list(range(30)), 4)
    assert again.data is buffer and store.spare_tokens == 0  # reused, not allocated
    assert torch.equal(again.data[:, :, :, :90], _expected(caches, list(range(30)), 90, 4))
    # a copy that needs more than the budget left once spares are dropped gets none
    store.release(2)
    assert store.acquire(3, 900, caches, list(range(240)), 4) is None
    assert store.tokens_held <= store.budget_tokens
    big = store.acquire(4, 700, caches, list(range(240)), 4)  # spares dropped to make room
    assert big is not None and store.spare_tokens == 0 and store.tokens_held <= store.budget_tokens
