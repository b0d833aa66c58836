"""Long-context decode rows attend over their contiguous K/V copies: same tokens and logits as
transformers and as the gather path, copies built mid-decode, budget honoured, dropped on exit."""

from __future__ import annotations

import torch

from macaron.engine import GenerateRequest
from macaron.engine.contiguous_kv import MIN_CONTEXT

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
    assert mem.kv_copy_bytes == 0 and not eng.runner.contiguous.copies  # dropped when the rows finished
    assert mem.kv_copy_max_bytes == eng.runner.contiguous.max_bytes > 0
    assert mem.total_bytes == (
        mem.base_weight_bytes + mem.adapter_host_bytes + mem.adapter_pool_bytes + mem.kv_cache_bytes + mem.kv_copy_bytes
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
        assert eng.runner.contiguous.tokens_held == 0


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
