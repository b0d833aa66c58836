"""Prefix reuse through the engine: same tokens as without reuse, cached_tokens reported, per adapter."""

from __future__ import annotations

from macaron.engine import GenerateRequest

from .helpers import greedy, make_engine, run_all

SYSTEM = "You are a helpful assistant. Answer briefly and precisely. " * 3


def test_prefix_reuse_gives_the_same_tokens_and_reports_cached_tokens(tiny_assets, engine):
    no_cache = make_engine(tiny_assets.model_dir, dict(tiny_assets.adapters))
    for adapter in (None, "code"):
        first = GenerateRequest(rid=f"a-{adapter}", prompt=SYSTEM + "Q: hi", sampling=greedy(10), lora_path=adapter)
        second = GenerateRequest(rid=f"b-{adapter}", prompt=SYSTEM + "Q: bye", sampling=greedy(10), lora_path=adapter)
        out1 = run_all(engine, [first])[first.rid]
        out2 = run_all(engine, [second])[second.rid]
        assert out1.cached_tokens == 0 or adapter is None  # base may hit an earlier test's blocks
        assert out2.cached_tokens >= 16 and out2.cached_tokens % engine.block_manager.block_size == 0
        # the same request on an engine that has never seen the prefix
        fresh = run_all(no_cache, [GenerateRequest(rid="c", prompt=SYSTEM + "Q: bye", sampling=greedy(10), lora_path=adapter)])
        assert fresh["c"].cached_tokens == 0
        assert fresh["c"].output_ids == out2.output_ids
        no_cache.block_manager.hash_to_block_id.clear()  # forget, so the next round is fresh too


def test_an_adapter_never_reuses_another_adapters_cache(engine):
    prompt = "Shared prefix that is long enough to fill a few blocks of the cache. " * 2
    outs = {}
    for adapter in ("chat", "agent", None, "ui"):
        rid = f"iso-{adapter}"
        outs[adapter] = run_all(engine, [GenerateRequest(rid=rid, prompt=prompt + str(adapter), sampling=greedy(4), lora_path=adapter)])[rid]
    assert outs["chat"].cached_tokens == 0
    assert outs["agent"].cached_tokens == 0
    assert outs["ui"].cached_tokens == 0
    again = run_all(engine, [GenerateRequest(rid="iso-again", prompt=prompt + "x", sampling=greedy(4), lora_path="agent")])
    assert again["iso-again"].cached_tokens > 0


def test_concurrent_requests_share_blocks_and_free_them(engine):
    prompt = SYSTEM + "Shared by many."
    reqs = [GenerateRequest(rid=f"sh-{i}", prompt=prompt + f" {i}", sampling=greedy(6), lora_path="chat") for i in range(6)]
    run_all(engine, reqs[:1])
    outs = run_all(engine, reqs[1:])
    assert all(o.cached_tokens > 0 for o in outs.values())
    assert not engine.block_manager.used_block_ids
    engine.block_manager.check_invariants()


def test_new_weights_under_a_reused_name_or_new_version_never_hit_the_old_cache(tiny_assets):
    """The cache key is the loaded instance, not the name: after `code` is replaced by different
    weights (same name, or code@v2), the cached prefix of the old weights is never reused."""
    eng = make_engine(tiny_assets.model_dir, {"code": tiny_assets.adapters["code"]})
    prompt = SYSTEM + "Q: versions"
    first = run_all(eng, [GenerateRequest(rid="v1", prompt=prompt, sampling=greedy(8), lora_path="code")])["v1"]
    again = run_all(eng, [GenerateRequest(rid="v1b", prompt=prompt, sampling=greedy(8), lora_path="code")])["v1b"]
    assert again.cached_tokens >= 16 and again.output_ids == first.output_ids  # the prefix is cached
    fresh = make_engine(tiny_assets.model_dir, {"chat": tiny_assets.adapters["chat"]})
    other = run_all(fresh, [GenerateRequest(rid="o", prompt=prompt, sampling=greedy(8), lora_path="chat")])["o"]
    assert other.output_ids != first.output_ids  # the other weights do answer differently
    assert eng.unload_adapter("code")
    for name in ("code", "code@v2"):
        eng.load_adapter(name, str(tiny_assets.adapters["chat"]))  # different weights
        out = run_all(eng, [GenerateRequest(rid=name, prompt=prompt, sampling=greedy(8), lora_path=name)])[name]
        assert out.cached_tokens == 0
        assert out.output_ids == other.output_ids
        assert eng.unload_adapter(name)
