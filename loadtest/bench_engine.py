"""Benchmark of the embedded engine (issue 4): multi-LoRA decode cost, prefix-cache TTFT, how close
decode runs to the machine's matmul limit, adapter memory, and PEFT side by side.

    python loadtest/bench_engine.py --quick    # under a minute when the bench model is cached
    python loadtest/bench_engine.py            # 64 new tokens, 3 repeats, 1,000-token prefix

One run, one engine, the project's bench model (~106 M parameters, hidden 768, 12 layers, four
rank-16 adapters; `macaron.assets.ensure_bench_model`, built on first use):

1. decode tokens/s at batch 16 for base only, one adapter, four adapters mixed (best of the
   repeats, interleaved; only steps where every row decodes count: `macaron.engine.bench`);
2. TTFT of a long prompt, fresh vs the same prompt again (prefix cached), driving step()
   directly; medians over distinct prompts;
3. the same matmuls a decode step runs over the layer stack and lm_head ([batch, in] against
   every weight, same dtype and threads, nothing else), best of several passes: the machine's
   limit for this work; mixed decode's model FLOP/s over it is `decode_flops_over_peak`;
4. adapter bytes next to base-weight bytes, as `engine.memory_usage()` accounts them;
5. peak RSS of the process with the engine alone (before PEFT loads its own copy);
6. transformers + PEFT `generate(adapter_names=...)` on the same 16 mixed requests and files.

A table goes to stdout first, progress to stderr; the last stdout line is one JSON object.
The figures are wall-clock on a CPU: on a shared machine, run it twice before reading much
into a few percent.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
import uuid
from pathlib import Path

import torch
from tqdm import tqdm

from macaron.engine.args import EngineArgs
from macaron.engine.bench import _prompts, engine_decode_tps, peft_decode_tps
from macaron.engine.engine import LLMEngine
from macaron.engine.models.layers import linear
from macaron.engine.protocol import GenerateRequest
from macaron.engine.sampling_params import SamplingParams


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


# --- 1. decode ---------------------------------------------------------------------------------
def decode_phase(
    eng: LLMEngine, prompts: list[list[int]], names: list[str], new_tokens: int, repeats: int, between=None
) -> dict:
    batch = len(prompts)
    configs = {
        "base": [None] * batch,
        "one_adapter": [names[0]] * batch,
        "mixed": [names[i % len(names)] for i in range(batch)],
    }
    engine_decode_tps(eng, prompts[:2], [None, names[0]], 4)  # warm-up (allocator, adapter slot)
    best = dict.fromkeys(configs, 0.0)
    keys = list(configs)
    for i in range(repeats):  # interleaved, order rotated, so that load from elsewhere skews all three alike
        for key in keys[i % 3 :] + keys[: i % 3]:
            best[key] = max(best[key], engine_decode_tps(eng, prompts, configs[key], new_tokens))
        if between is not None:
            between()
    return best


# --- 2. TTFT -----------------------------------------------------------------------------------
def ttft(eng: LLMEngine, prompt: list[int], adapter: str | None) -> tuple[float, int]:
    """Seconds from add_request to the end of the step that samples its first token; cached tokens."""
    params = SamplingParams(temperature=0, max_new_tokens=1, ignore_eos=True)
    rid = f"ttft-{uuid.uuid4().hex[:12]}"
    t0 = time.perf_counter()
    seq = eng.add_request(GenerateRequest(rid=rid, prompt=prompt, sampling=params, lora_path=adapter))
    cached = 0
    while seq.num_output_tokens == 0:
        for out in eng.step():
            if out.rid == rid:
                cached = out.cached_tokens
    elapsed = time.perf_counter() - t0
    while eng.has_unfinished():
        eng.step()
    return elapsed, cached


def ttft_phase(eng: LLMEngine, prompt_len: int, adapter: str | None, repeats: int) -> dict:
    gen = torch.Generator().manual_seed(1234)
    low = 16  # skip the first ids (special tokens live there)
    warm = torch.randint(low, eng.vocab_size, (128,), generator=gen).tolist()
    ttft(eng, warm, adapter)  # warm-up: the fresh path,
    ttft(eng, warm, adapter)  # and the cached one
    fresh, cached, hits = [], [], []
    for _ in range(repeats):
        prompt = torch.randint(low, eng.vocab_size, (prompt_len,), generator=gen).tolist()  # a new prefix
        t_fresh, c_fresh = ttft(eng, prompt, adapter)
        t_cached, c_cached = ttft(eng, prompt, adapter)
        if c_fresh or not c_cached:
            raise RuntimeError(f"prefix cache: fresh prompt {c_fresh} cached tokens, repeated prompt {c_cached}")
        fresh.append(t_fresh)
        cached.append(t_cached)
        hits.append(c_cached)
    return {
        "uncached_s": statistics.median(fresh),
        "cached_s": statistics.median(cached),
        "cached_tokens": min(hits),
        "prompt_len": prompt_len,
    }


# --- 3. the machine's matmul limit ---------------------------------------------------------------
def stack_weights(eng: LLMEngine) -> list[torch.Tensor]:
    """Every weight matrix a decode step multiplies by, in order: per layer qkv, o, gate_up, down; lm_head."""
    ws: list[torch.Tensor] = []
    for layer in eng.runner.model.layers:
        ws += [layer.qkv, layer.o, layer.gate_up, layer.down]
    return ws + [eng.runner.model.lm_head]


def lora_flops_per_token(eng: LLMEngine, adapter_names: list[str]) -> float:
    """Useful LoRA FLOPs per token, averaged over rows using these adapters: 2·r·(in+out) per module."""
    shape = eng.runner.shape
    total = 0.0
    for name in adapter_names:
        adapter = eng.lora.adapters[name]
        for (_, module), (a, _b) in adapter.weights.items():
            in_f, out_f = shape.in_out(module)
            total += 2 * a.shape[0] * (in_f + out_f)
    return total / len(adapter_names)


@torch.inference_mode()
def matmul_peak(weights: list[torch.Tensor], batch: int, repeats: int, best: dict | None = None) -> dict:
    """FLOP/s of [batch, in] @ W.T over the whole stack, best pass: plain torch.matmul, and the engine's
    `linear` (which splits wide outputs); the peak is the better of the two. Passing the previous
    result keeps the best over calls (the bench runs a few passes after each decode round, so that
    the limit and decode see the same load from elsewhere on the machine)."""
    xs = {w.shape[1]: torch.randn(batch, w.shape[1], dtype=w.dtype) for w in weights}
    flops = sum(2 * batch * w.numel() for w in weights)

    def plain() -> None:
        for w in weights:
            torch.matmul(xs[w.shape[1]], w.t())

    def engine_linear() -> None:
        for w in weights:
            linear(xs[w.shape[1]], w)

    out = dict(best or {"matmul": 0.0, "linear": 0.0})
    for key, fn in (("matmul", plain), ("linear", engine_linear)):
        fn()  # warm-up
        fastest = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            fastest = min(fastest, time.perf_counter() - t0)
        out[key] = max(out[key], flops / fastest)
    out["peak"] = max(out["matmul"], out["linear"])
    return out


# --- report ------------------------------------------------------------------------------------
def table(rows: list[tuple[str, str, str]]) -> str:
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    return "\n".join(f"  {a:<{w0}}  {b:>{w1}}  {c}".rstrip() for a, b, c in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="16 new tokens, 2 repeats, 512-token TTFT prompt, PEFT once")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--prompt-len", type=int, help="prompt tokens of each decode request (default 32; --quick 16)")
    ap.add_argument("--new-tokens", type=int, help="decode tokens per request (default 64; --quick 16)")
    ap.add_argument("--repeats", type=int, help="repeats of each decode figure (default 3; --quick 2)")
    ap.add_argument("--ttft-prompt-len", type=int, help="TTFT prompt tokens (default 1000; --quick 512)")
    ap.add_argument("--ttft-repeats", type=int, help="distinct TTFT prompts (default 5; --quick 3)")
    ap.add_argument("--no-peft", action="store_true", help="skip the transformers + PEFT run")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: the engine's default)")
    ap.add_argument("--max-total-tokens", type=int, default=16384, help="the engine's KV-cache budget in tokens")
    a = ap.parse_args()
    q = a.quick
    a.prompt_len = a.prompt_len or (16 if q else 32)
    new_tokens = a.new_tokens or (16 if q else 64)
    repeats = a.repeats or (2 if q else 3)
    ttft_len = a.ttft_prompt_len or (512 if q else 1000)
    ttft_repeats = a.ttft_repeats or (3 if q else 5)
    peft_repeats = 1 if q else repeats

    t_start, cpu_start = time.perf_counter(), time.process_time()
    phases = ["model", "engine", "decode", "ttft", "matmul peak", "peft"][: 5 if a.no_peft else 6]
    bar = tqdm(total=len(phases), desc="bench_engine", unit="phase", file=sys.stderr)

    last = [time.perf_counter(), ""]

    def phase(name: str) -> None:
        now = time.perf_counter()
        if last[1]:
            tqdm.write(f"  {last[1]}: {now - last[0]:.1f} s", file=sys.stderr)
        last[:] = [now, name]
        bar.set_postfix_str(name)

    phase("model")
    from macaron.assets import ensure_bench_model

    assets = ensure_bench_model(progress=False)
    model_dir, adapters = Path(assets.model_dir), {k: Path(v) for k, v in assets.adapters.items()}
    names = list(adapters)
    bar.update()

    phase("engine")
    eng = LLMEngine(
        EngineArgs(
            model_path=str(model_dir),
            lora_paths=[f"{k}={v}" for k, v in adapters.items()],
            max_running_requests=a.batch,
            max_total_tokens=max(a.max_total_tokens, 2 * a.batch * (a.prompt_len + new_tokens), 4 * ttft_len),
            num_threads=a.threads or None,
        )
    )
    threads = torch.get_num_threads()
    prompts = _prompts(eng.tokenizer, a.batch, a.prompt_len)
    mixed_names = [names[i % len(names)] for i in range(a.batch)]
    bar.update()

    phase("decode")
    weights = stack_weights(eng)
    peak: dict = {}

    def peak_passes() -> None:
        peak.update(matmul_peak(weights, a.batch, 3, peak or None))

    tps = decode_phase(eng, prompts, names, new_tokens, repeats, between=peak_passes)
    bar.update()

    phase("ttft")
    tt = ttft_phase(eng, ttft_len, names[0], ttft_repeats)
    bar.update()

    phase("matmul peak")
    peak_passes()
    base_flops_tok = sum(2 * w.numel() for w in weights)
    mixed_flops_tok = base_flops_tok + lora_flops_per_token(eng, mixed_names)
    mixed_flops_s = tps["mixed"] * mixed_flops_tok
    base_flops_s = tps["base"] * base_flops_tok
    mem = eng.memory_usage()
    rss_engine = rss_mb()
    bar.update()

    peft_tps = None
    if not a.no_peft:
        phase("peft")
        torch.set_num_threads(threads)
        peft_tps = peft_decode_tps(model_dir, adapters, prompts, mixed_names, new_tokens, peft_repeats)
        bar.update()
    phase("")
    bar.close()
    wall = time.perf_counter() - t_start
    cpu_share = (time.process_time() - cpu_start) / wall / threads

    adapter_bytes = sum(mem.adapter_bytes.values())
    mb = 1 / 2**20
    stack_params = sum(w.numel() for w in weights)
    kv_tokens = eng.block_manager.num_blocks * eng.block_manager.block_size
    result = {
        "base_tok_s": round(tps["base"], 1),
        "one_adapter_tok_s": round(tps["one_adapter"], 1),
        "mixed_tok_s": round(tps["mixed"], 1),
        "mixed_over_base": round(tps["mixed"] / tps["base"], 3),
        "one_adapter_over_base": round(tps["one_adapter"] / tps["base"], 3),
        "ttft_uncached_ms": round(tt["uncached_s"] * 1e3, 1),
        "ttft_cached_ms": round(tt["cached_s"] * 1e3, 1),
        "ttft_cached_over_uncached": round(tt["cached_s"] / tt["uncached_s"], 3),
        "ttft_prompt_tokens": tt["prompt_len"],
        "ttft_cached_tokens": tt["cached_tokens"],
        "matmul_peak_gflop_s": round(peak["peak"] / 1e9, 2),
        "mixed_decode_gflop_s": round(mixed_flops_s / 1e9, 2),
        "decode_flops_over_peak": round(mixed_flops_s / peak["peak"], 3),
        "peft_mixed_tok_s": round(peft_tps, 1) if peft_tps else None,
        "mixed_over_peft": round(tps["mixed"] / peft_tps, 2) if peft_tps else None,
        "base_weight_mb": round(mem.base_weight_bytes * mb, 1),
        "adapters_mb": round(adapter_bytes * mb, 1),
        "adapters_over_base_bytes": round(adapter_bytes / mem.base_weight_bytes, 4),
        "kv_cache_mb": round(mem.kv_cache_bytes * mb, 1),
        "peak_rss_mb": round(rss_engine, 1),
        "peak_rss_with_peft_mb": round(rss_mb(), 1),
        "batch": a.batch,
        "new_tokens": new_tokens,
        "repeats": repeats,
        "threads": threads,
        "dtype": str(eng.dtype).removeprefix("torch."),
        "quick": q,
        "wall_s": round(wall, 1),
        "cpu_share": round(cpu_share, 2),
    }
    r = result
    rows = [
        ("figure", "value", "note"),
        ("decode base", f"{r['base_tok_s']:.1f} tok/s",
         f"batch {a.batch}, {a.prompt_len}+{new_tokens} tokens, best of {repeats}"),
        ("decode one adapter", f"{r['one_adapter_tok_s']:.1f} tok/s",
         f"{names[0]}; /base = {r['one_adapter_over_base']:.3f}"),
        ("decode 4 adapters mixed", f"{r['mixed_tok_s']:.1f} tok/s", f"{', '.join(names)}"),
        ("  mixed / base", f"{r['mixed_over_base']:.3f}", "target >= 0.85, aim 0.95"),
        ("TTFT uncached", f"{r['ttft_uncached_ms']:.1f} ms", f"{ttft_len}-token prompt, median of {ttft_repeats}"),
        ("TTFT cached", f"{r['ttft_cached_ms']:.1f} ms", f"same prompt again, {tt['cached_tokens']} tokens from cache"),
        ("  cached / uncached", f"{r['ttft_cached_over_uncached']:.3f}", ""),
        ("matmul limit (stack+lm_head)", f"{r['matmul_peak_gflop_s']:.2f} GFLOP/s",
         f"[{a.batch}, in] x {len(weights)} weights ({stack_params / 1e6:.1f} M), "
         f"matmul {peak['matmul'] / 1e9:.2f} / engine linear {peak['linear'] / 1e9:.2f}"),
        ("mixed decode model FLOP/s", f"{r['mixed_decode_gflop_s']:.2f} GFLOP/s",
         f"{mixed_flops_tok / 1e6:.1f} MFLOP/token incl. LoRA; base {base_flops_s / 1e9:.2f} GFLOP/s"),
        ("  decode_flops_over_peak", f"{r['decode_flops_over_peak']:.3f}", "aim >= 0.5"),
        ("PEFT mixed generate", f"{r['peft_mixed_tok_s']:.1f} tok/s" if peft_tps else "skipped",
         f"transformers + PEFT adapter_names, best of {peft_repeats}"),
        ("  mixed / PEFT", f"{r['mixed_over_peft']:.2f}x" if peft_tps else "-", ""),
        ("base weights", f"{r['base_weight_mb']:.1f} MB", f"{r['dtype']}"),
        ("adapters (4)", f"{r['adapters_mb']:.1f} MB",
         ", ".join(f"{k} {v * mb:.1f}" for k, v in mem.adapter_bytes.items())),
        ("  adapters / base", f"{r['adapters_over_base_bytes']:.4f}", ""),
        ("KV cache", f"{r['kv_cache_mb']:.1f} MB", f"preallocated, {kv_tokens} tokens"),
        ("peak RSS (engine)", f"{r['peak_rss_mb']:.1f} MB", f"with PEFT loaded: {r['peak_rss_with_peft_mb']:.1f} MB"),
        ("threads / wall", f"{threads} / {r['wall_s']:.1f} s", "torch threads for engine, PEFT and matmul limit"),
        ("CPU share", f"{cpu_share:.2f}", "CPU time / (wall x threads); well under 1: a busy machine, noisy figures"),
    ]
    mode = "quick" if q else "full"
    print(f"macaron engine benchmark ({mode}), bench model: {stack_params / 1e6:.0f} M params in decode matmuls")
    print(table(rows))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
