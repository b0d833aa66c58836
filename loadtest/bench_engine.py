"""Benchmark of the embedded engine (issues 4, 16): multi-LoRA decode cost, grouped-LoRA scaling,
prefix-cache TTFT, decode against the machine's own ceilings, memory by kind, PEFT and llama.cpp.

    python loadtest/bench_engine.py --quick    # a few minutes when the bench model is cached
    python loadtest/bench_engine.py            # 64 new tokens, 3 repeats, 1,000-token prefix
    python loadtest/bench_engine.py --model DIR [--lora NAME=DIR ...]   # any HF Llama directory

One run, one engine; by default the real default model, SmolLM2-135M-Instruct with its four
trained rank-8 specialists (`--model bench`: the ~106 M random model with rank-16 adapters). With
--model DIR and no --lora, four random rank-64 adapters on all seven projections are written for it.

1. decode tokens/s at batch 16 for base only, one adapter, four adapters mixed, and mixed with
   sampling (best of the repeats, interleaved; only steps where every row decodes count:
   `macaron.engine.bench`); then the same at 1,024 and 4,096 tokens of context (--contexts; rows
   share one prefix, prefilled once per adapter), greedy and sampled, mixed with the copies built
   at the first decode step by gathering the blocks (the engine before prefill wrote them), and mixed
   with attention gathering the paged cache every step instead of reading the copies;
2. grouped LoRA: mixed/base with 1, 2, 4 and 8 distinct adapters at ranks 8, 16 and 64 (random
   adapters on all seven projections, base measured in the same round);
3. TTFT of a long prompt, fresh vs the same prompt again (prefix cached), driving step()
   directly; medians over distinct prompts;
4. the machine's ceilings, measured in the same run: a large fp32 GEMM (compute peak), a
   STREAM-style copy (memory bandwidth), and the same matmuls a decode step runs timed alone;
   mixed decode's model FLOP/s and bytes/s (weights + active adapters + KV read per step) over them;
5. memory by kind as `engine.memory_usage()` accounts it: base weights, adapter host copies, the
   LoRA slot pool (0 on CPU, where slots read the host copies; what an accelerator would hold
   is printed next to it), KV cache;
6. peak RSS of the process with the engine alone (before PEFT loads its own copy);
7. transformers + PEFT `generate(adapter_names=...)` on the same 16 mixed requests and files;
8. llama.cpp's server with the same adapters and requests (per-request LoRA scales), when a
   `llama-server` binary is there: scripts/build_llamacpp.sh builds one from source and the bench
   finds it, or --llama-server PATH --llama-cpp-dir TREE; else null and why.

A table goes to stdout first, progress to stderr; the last stdout line is one JSON object.
The figures are wall-clock on a CPU: on a shared machine, run it twice before reading much
into a few percent.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import torch
from tqdm import tqdm

from macaron.engine.args import EngineArgs
from macaron.engine.bench import (
    _prompts,
    engine_decode_tps,
    long_prompts,
    peft_decode_tps,
    warm_prefix,
    write_random_adapters,
)
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
    mixed = [names[i % len(names)] for i in range(batch)]
    configs = {
        "base": ([None] * batch, 0.0),
        "one_adapter": ([names[0]] * batch, 0.0),
        "mixed": (mixed, 0.0),
        "mixed_sampling": (mixed, SAMPLING_TEMPERATURE),
    }
    engine_decode_tps(eng, prompts[:2], [None, names[0]], 4)  # warm-up (allocator, adapter slot)
    best = dict.fromkeys(configs, 0.0)
    keys = list(configs)
    for i in range(repeats):  # interleaved, order rotated, so that load from elsewhere skews all alike
        for key in keys[i % len(keys) :] + keys[: i % len(keys)]:
            rows, temperature = configs[key]
            best[key] = max(best[key], engine_decode_tps(eng, prompts, rows, new_tokens, temperature))
        if between is not None:
            between()
    return best


SAMPLING_TEMPERATURE = 0.7
"""Sampled rows use this temperature with top_p 0.95 and top_k 50 (seeded per row)."""


# --- 1b. decode at long contexts -------------------------------------------------------------------
def long_context_phase(eng: LLMEngine, names: list[str], context: int, batch: int, new_tokens: int, repeats: int) -> dict:
    """Decode tokens/s with every row at `context` tokens (one shared prefix, prefilled once per
    adapter): base and four adapters mixed, greedy and sampled; mixed greedy with the copies built
    at the first decode step by gathering the blocks (the engine before prefill wrote them); and
    mixed greedy with attention gathering the paged cache every step instead of reading copies.
    Best of `repeats`, interleaved, order rotated; wall seconds include the rows' prefill chunks
    (where copies are now written), so that cost moved out of decode still shows."""
    mixed = [names[i % len(names)] for i in range(batch)]
    prompts = long_prompts(eng.vocab_size, batch, context, seed=context)
    warm_prefix(eng, prompts[0], {None, *mixed})
    store = eng.runner.contiguous
    budget = store.budget_tokens

    def run(rows: list[str | None], temperature: float, copies: str) -> tuple[float, float]:
        """(decode tokens/s, wall seconds of the whole run, the rows' prefill chunks included)."""
        store.budget_tokens = 0 if copies == "none" else budget
        store.incremental = copies == "incremental"
        try:
            t0 = time.perf_counter()
            tps = engine_decode_tps(eng, prompts, rows, new_tokens, temperature)
            return tps, time.perf_counter() - t0
        finally:
            store.budget_tokens = budget
            store.incremental = True

    configs = {
        "base": ([None] * batch, 0.0, "incremental"),
        "mixed": (mixed, 0.0, "incremental"),
        "base_sampling": ([None] * batch, SAMPLING_TEMPERATURE, "incremental"),
        "mixed_sampling": (mixed, SAMPLING_TEMPERATURE, "incremental"),
        "mixed_copy_at_decode": (mixed, 0.0, "at_decode"),
        "mixed_gather": (mixed, 0.0, "none"),
    }
    best = dict.fromkeys(configs, 0.0)
    wall = dict.fromkeys(configs, float("inf"))
    keys = list(configs)
    for i in range(repeats):
        for key in keys[i % len(keys) :] + keys[: i % len(keys)]:
            tps, seconds = run(*configs[key])
            best[key] = max(best[key], tps)
            wall[key] = min(wall[key], seconds)
    return {
        **{f"{k}_tok_s": round(v, 2) for k, v in best.items()},
        "mixed_wall_s": round(wall["mixed"], 2),
        "mixed_copy_at_decode_wall_s": round(wall["mixed_copy_at_decode"], 2),
        "mixed_gather_wall_s": round(wall["mixed_gather"], 2),
        "mixed_over_base": round(best["mixed"] / best["base"], 3),
        "mixed_sampling_over_base_sampling": round(best["mixed_sampling"] / best["base_sampling"], 3),
        "copy_over_gather": round(best["mixed"] / best["mixed_gather"], 2),
        "copy_over_copy_at_decode": round(best["mixed"] / best["mixed_copy_at_decode"], 2),
        "batch": batch,
    }


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
def stack_weights(eng: LLMEngine, dense: bool = True) -> list[torch.Tensor]:
    """Every weight matrix a decode step multiplies by, in order: per layer qkv, o, gate_up, down; lm_head.
    dense: plain row-major copies of the ones the engine packed for oneDNN (else the engine's own)."""
    ws: list[torch.Tensor] = []
    for layer in eng.runner.model.layers:
        ws += [layer.qkv, layer.o, layer.gate_up, layer.down]
    ws.append(eng.runner.model.lm_head)
    return [w.to_dense() if dense and w.is_mkldnn else w for w in ws]


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
def matmul_peak(
    weights: list[torch.Tensor], batch: int, repeats: int, best: dict | None = None,
    engine_weights: list[torch.Tensor] | None = None,
) -> dict:
    """FLOP/s of [batch, in] @ W.T over the whole stack, best pass: plain torch.matmul on the row-major
    weights, and the engine's `linear` on the engine's own (`engine_weights`: packed for oneDNN on
    CPU, else split wide outputs); the peak is the better of the two. Passing the previous
    result keeps the best over calls (the bench runs a few passes after each decode round, so that
    the limit and decode see the same load from elsewhere on the machine)."""
    xs = {w.shape[1]: torch.randn(batch, w.shape[1], dtype=w.dtype) for w in weights}
    flops = sum(2 * batch * w.numel() for w in weights)

    def plain() -> None:
        for w in weights:
            torch.matmul(xs[w.shape[1]], w.t())

    def engine_linear() -> None:
        for w in engine_weights or weights:
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


# --- 2. grouped LoRA scaling -------------------------------------------------------------------
def lora_sweep(
    eng: LLMEngine, model_dir: Path, prompts: list[list[int]], new_tokens: int, repeats: int, workdir: Path,
    base_bytes: int, ranks: tuple[int, ...] = (8, 16, 64), counts: tuple[int, ...] = (1, 2, 4, 8),
) -> tuple[dict[str, float], dict[str, float]]:
    """mixed/base for `counts` distinct adapters at each rank: best mixed over best base, base timed
    before and after each round so that load from elsewhere on the machine skews both alike."""
    batch = len(prompts)
    out: dict[str, float] = {}
    bound: dict[str, float] = {}
    """Decode at batch 16 reads every weight once per step: if those bytes set the pace, a step that
    also reads c adapters' weights runs base_bytes / (base_bytes + c adapters' bytes) as fast
    (a guide, not a hard bound: caches and compute-bound work move it either way)."""
    for rank in ranks:
        paths = write_random_adapters(model_dir, workdir / f"r{rank}", count=max(counts), rank=rank, seed=rank)
        names = [f"sweep-{n}" for n in paths]
        for name, path in zip(names, paths.values()):
            eng.load_adapter(name, str(path))
        best = {c: 0.0 for c in counts}
        base = 0.0
        for i in range(repeats):
            base = max(base, engine_decode_tps(eng, prompts, [None] * batch, new_tokens))
            for c in counts if i % 2 == 0 else counts[::-1]:
                rows = [names[j % c] for j in range(batch)]
                best[c] = max(best[c], engine_decode_tps(eng, prompts, rows, new_tokens))
            base = max(base, engine_decode_tps(eng, prompts, [None] * batch, new_tokens))
        one = eng.lora.adapters[names[0]].nbytes
        for c in counts:
            out[f"r{rank}_x{c}"] = round(best[c] / base, 3)
            bound[f"r{rank}_x{c}"] = round(base_bytes / (base_bytes + c * one), 3)
        for name in names:
            eng.unload_adapter(name)
    return out, bound


# --- 4. the machine's ceilings --------------------------------------------------------------------
@torch.inference_mode()
def gemm_peak(n: int = 2048, repeats: int = 5) -> float:
    """FLOP/s of one large square fp32 matmul, best of `repeats`: the compute ceiling."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    fastest = min(_timed(lambda: torch.mm(a, b)) for _ in range(repeats))
    return 2 * n**3 / fastest


@torch.inference_mode()
def copy_bandwidth(megabytes: int = 256, repeats: int = 5) -> float:
    """Bytes/s of a STREAM-style copy (read + write counted), best of `repeats`: the memory ceiling."""
    src = torch.ones(megabytes * 2**20 // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)
    fastest = min(_timed(lambda: dst.copy_(src)) for _ in range(repeats))
    return 2 * src.nbytes / fastest


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def decode_bytes_per_step(eng: LLMEngine, weights: list[torch.Tensor], adapters: list[str], batch: int, context: float) -> float:
    """Bytes a mixed decode step must read at least: every weight once, each active adapter once,
    and each row's KV cache over its context."""
    shape = eng.runner.shape
    kv_per_token = 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * eng.dtype.itemsize
    lora = sum(eng.lora.adapters[name].nbytes for name in set(adapters))
    return sum(w.nbytes for w in weights) + lora + batch * context * kv_per_token


# --- 8. llama.cpp ----------------------------------------------------------------------------------
def built_llamacpp() -> tuple[str | None, str | None]:
    """The `llama-server` and llama.cpp tree that scripts/build_llamacpp.sh leaves in its cache
    ($LLAMACPP_CACHE, else the project's .cache/llamacpp; newest build), or (None, None)."""
    cache = Path(os.environ.get("LLAMACPP_CACHE") or Path(__file__).resolve().parent.parent / ".cache" / "llamacpp")
    servers = sorted(cache.glob("build-*/bin/llama-server"))
    if not servers:
        return None, None
    version = servers[-1].parent.parent.name.removeprefix("build-")
    tree = cache / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    return str(servers[-1]), str(tree) if tree.is_dir() else None


def llamacpp_reason(server: str | None) -> str | None:
    """None when llama.cpp can run here, else why not (printed, and the JSON figure is null)."""
    if not server:
        return (
            "no llama-server binary: run scripts/build_llamacpp.sh (builds it from llama-cpp-python's source "
            "distribution; the bench then finds it), or give --llama-server PATH --llama-cpp-dir TREE"
        )
    if not Path(server).is_file():
        return f"--llama-server {server} does not exist"
    return None


# --- report ------------------------------------------------------------------------------------
def table(rows: list[tuple[str, str, str]]) -> str:
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    return "\n".join(f"  {a:<{w0}}  {b:>{w1}}  {c}".rstrip() for a, b, c in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="16 new tokens, 2 repeats, 512-token TTFT prompt, PEFT once")
    ap.add_argument("--model", default="smollm2",
                    help="a built-in model (smollm2, the default real model with its four trained adapters; bench; "
                    "tiny) or a Hugging Face Llama directory")
    ap.add_argument("--lora", action="append", default=[], metavar="NAME=DIR",
                    help="adapters of --model (default: four random rank-64 adapters written for it)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--prompt-len", type=int, help="prompt tokens of each decode request (default 32; --quick 16)")
    ap.add_argument("--new-tokens", type=int, help="decode tokens per request (default 64; --quick 16)")
    ap.add_argument("--repeats", type=int, help="repeats of each decode figure (default 3; --quick 2)")
    ap.add_argument("--ttft-prompt-len", type=int, help="TTFT prompt tokens (default 1000; --quick 512)")
    ap.add_argument("--ttft-repeats", type=int, help="distinct TTFT prompts (default 5; --quick 3)")
    ap.add_argument("--contexts", default=None,
                    help="comma-separated prompt lengths for the long-context decode phase (default 1024,4096; "
                    "--quick 1024; 0 skips it)")
    ap.add_argument("--long-batch", type=int, default=8,
                    help="rows in the long-context phase (their contiguous K/V copies take batch x context x "
                    "the KV bytes per token)")
    ap.add_argument("--long-new-tokens", type=int, default=16, help="decode tokens per row at long contexts")
    ap.add_argument("--no-peft", action="store_true", help="skip the transformers + PEFT run")
    ap.add_argument("--no-sweep", action="store_true", help="skip the grouped-LoRA sweep (ranks x adapter counts)")
    ap.add_argument("--no-ttft", action="store_true", help="skip the prefix-cache TTFT phase")
    built_server, built_tree = built_llamacpp()
    ap.add_argument("--llama-server", default=os.environ.get("LLAMA_SERVER") or built_server,
                    help="llama.cpp server binary to compare with (default: $LLAMA_SERVER, else the one "
                    "scripts/build_llamacpp.sh built)")
    ap.add_argument("--llama-cpp-dir", default=os.environ.get("LLAMA_CPP_DIR") or built_tree,
                    help="llama.cpp source tree (its convert_hf_to_gguf.py / convert_lora_to_gguf.py; default: "
                    "$LLAMA_CPP_DIR, else the one scripts/build_llamacpp.sh unpacked)")
    ap.add_argument("--no-llamacpp", action="store_true", help="skip the llama.cpp peer")
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
    sweep_repeats = 2 if q else 3
    contexts = [int(c) for c in (a.contexts or ("1024" if q else "1024,4096")).split(",") if int(c) > 0]
    workdir = Path(tempfile.mkdtemp(prefix="macaron-bench-"))

    t_start, cpu_start = time.perf_counter(), time.process_time()
    phases = ["model", "engine", "decode", "long context", "lora sweep", "ttft", "ceilings", "peft", "llama.cpp"]
    bar = tqdm(total=len(phases), desc="bench_engine", unit="phase", file=sys.stderr)

    last = [time.perf_counter(), ""]

    def phase(name: str) -> None:
        now = time.perf_counter()
        if last[1]:
            tqdm.write(f"  {last[1]}: {now - last[0]:.1f} s", file=sys.stderr)
        last[:] = [now, name]
        bar.set_postfix_str(name)

    phase("model")
    if a.model in ("smollm2", "bench", "tiny"):
        from macaron.assets.builtin import ensure_builtin_model

        assets = ensure_builtin_model(a.model, progress=False)
        model_dir, adapters = Path(assets.model_dir), {k: Path(v) for k, v in assets.adapters.items()}
        model_label = {"smollm2": "SmolLM2-135M-Instruct", "bench": "bench model", "tiny": "tiny model"}[a.model]
    else:
        model_dir = Path(a.model)
        adapters = {k: Path(v) for k, v in (spec.split("=", 1) for spec in a.lora)}
        if not adapters:
            made = write_random_adapters(model_dir, workdir / "given", count=4, rank=64, seed=4)
            adapters = {f"lora{i}": path for i, path in enumerate(made.values())}
        model_label = model_dir.name
    names = list(adapters)
    bar.update()

    phase("engine")
    eng = LLMEngine(
        EngineArgs(
            model_path=str(model_dir),
            lora_paths=[f"{k}={v}" for k, v in adapters.items()],
            max_running_requests=a.batch,
            max_total_tokens=max(
                a.max_total_tokens,
                2 * a.batch * (a.prompt_len + new_tokens),
                4 * ttft_len,
                6 * max(contexts, default=0) + a.long_batch * (a.long_new_tokens + 32),
            ),
            # the long-context rows share their prefix's blocks but each holds its own copy
            decode_kv_copy_tokens=max(
                a.max_total_tokens, a.long_batch * (max(contexts, default=0) * 9 // 8 + a.long_new_tokens + 256)
            ),
            num_threads=a.threads or None,
        )
    )
    threads = torch.get_num_threads()
    prompts = _prompts(eng.tokenizer, a.batch, a.prompt_len)
    mixed_names = [names[i % len(names)] for i in range(a.batch)]
    bar.update()

    phase("decode")
    weights = stack_weights(eng)
    engine_weights = stack_weights(eng, dense=False)
    peak: dict = {}

    def peak_passes() -> None:
        peak.update(matmul_peak(weights, a.batch, 3, peak or None, engine_weights))

    tps = decode_phase(eng, prompts, names, new_tokens, repeats, between=peak_passes)
    bar.update()

    phase("long context")
    long_ctx = {
        c: long_context_phase(eng, names, c, a.long_batch, a.long_new_tokens, repeats) for c in contexts
    }
    bar.update()

    phase("lora sweep")
    weight_bytes = sum(w.nbytes for w in weights)
    sweep, sweep_bound = ({}, {}) if a.no_sweep else lora_sweep(
        eng, model_dir, prompts, new_tokens, sweep_repeats, workdir / "sweep", weight_bytes
    )
    bar.update()

    phase("ttft")
    nan = float("nan")
    tt = (
        {"uncached_s": nan, "cached_s": nan, "cached_tokens": 0, "prompt_len": 0}
        if a.no_ttft
        else ttft_phase(eng, ttft_len, names[0], ttft_repeats)
    )
    bar.update()

    phase("ceilings")
    peak_passes()
    gemm = max(gemm_peak() for _ in range(2))
    bandwidth = max(copy_bandwidth() for _ in range(2))
    base_flops_tok = sum(2 * w.numel() for w in weights)
    mixed_flops_tok = base_flops_tok + lora_flops_per_token(eng, mixed_names)
    mixed_flops_s = tps["mixed"] * mixed_flops_tok
    base_flops_s = tps["base"] * base_flops_tok
    step_bytes = decode_bytes_per_step(eng, weights, mixed_names, a.batch, a.prompt_len + new_tokens / 2)
    mixed_bytes_s = tps["mixed"] / a.batch * step_bytes
    mem = eng.memory_usage()
    rss_engine = rss_mb()
    bar.update()

    peft_tps = None
    phase("peft")
    if not a.no_peft:
        torch.set_num_threads(threads)
        peft_tps = peft_decode_tps(model_dir, adapters, prompts, mixed_names, new_tokens, peft_repeats)
    bar.update()

    phase("llama.cpp")
    llama_tps, llama_why = None, "skipped (--no-llamacpp)" if a.no_llamacpp else llamacpp_reason(a.llama_server)
    if llama_why is None:
        from llamacpp_peer import LlamaCppError, llamacpp_decode_tps  # beside this script

        try:
            llama_tps = llamacpp_decode_tps(
                a.llama_server, a.llama_cpp_dir, model_dir, adapters, prompts, mixed_names, new_tokens, workdir / "gguf",
                threads=threads,
            )
        except LlamaCppError as exc:
            llama_why = str(exc)
    bar.update()
    phase("")
    bar.close()
    wall = time.perf_counter() - t_start
    cpu_share = (time.process_time() - cpu_start) / wall / threads

    adapter_bytes = mem.adapter_host_bytes
    mb = 1 / 2**20
    stack_params = sum(w.numel() for w in weights)
    kv_tokens = eng.block_manager.num_blocks * eng.block_manager.block_size
    with_pool = adapter_bytes + mem.adapter_pool_bytes_on_accelerator
    result = {
        "base_tok_s": round(tps["base"], 1),
        "one_adapter_tok_s": round(tps["one_adapter"], 1),
        "mixed_tok_s": round(tps["mixed"], 1),
        "mixed_over_base": round(tps["mixed"] / tps["base"], 3),
        "one_adapter_over_base": round(tps["one_adapter"] / tps["base"], 3),
        "mixed_sampling_tok_s": round(tps["mixed_sampling"], 1),
        "mixed_sampling_over_mixed": round(tps["mixed_sampling"] / tps["mixed"], 3),
        "long_context": {str(c): v for c, v in long_ctx.items()} or None,
        "mixed_over_base_8_adapters": sweep.get("r64_x8"),
        "mixed_over_base_rank64": sweep.get("r64_x4"),
        "lora_sweep_mixed_over_base": sweep or None,
        "lora_sweep_bandwidth_bound": sweep_bound or None,
        "ttft_uncached_ms": None if a.no_ttft else round(tt["uncached_s"] * 1e3, 1),
        "ttft_cached_ms": None if a.no_ttft else round(tt["cached_s"] * 1e3, 1),
        "ttft_cached_over_uncached": None if a.no_ttft else round(tt["cached_s"] / tt["uncached_s"], 3),
        "ttft_prompt_tokens": tt["prompt_len"],
        "ttft_cached_tokens": tt["cached_tokens"],
        "gemm_peak_gflop_s": round(gemm / 1e9, 2),
        "copy_bandwidth_gb_s": round(bandwidth / 1e9, 2),
        "matmul_peak_gflop_s": round(peak["peak"] / 1e9, 2),
        "mixed_decode_gflop_s": round(mixed_flops_s / 1e9, 2),
        "mixed_decode_gb_s": round(mixed_bytes_s / 1e9, 2),
        "decode_flops_over_peak": round(mixed_flops_s / gemm, 3),
        "decode_flops_over_stack_matmuls": round(mixed_flops_s / peak["peak"], 3),
        "decode_bytes_over_bandwidth": round(mixed_bytes_s / bandwidth, 3),
        "peft_mixed_tok_s": round(peft_tps, 1) if peft_tps else None,
        "mixed_over_peft": round(tps["mixed"] / peft_tps, 2) if peft_tps else None,
        "llamacpp_mixed_tok_s": round(llama_tps, 1) if llama_tps else None,
        "mixed_over_llamacpp": round(tps["mixed"] / llama_tps, 2) if llama_tps else None,
        "llamacpp_skipped_because": llama_why,
        "base_weight_mb": round(mem.base_weight_bytes * mb, 1),
        "packed_head_copy_mb": round(mem.packed_head_copy_bytes * mb, 1),
        "adapters_mb": round(adapter_bytes * mb, 1),
        "adapter_pool_bytes": mem.adapter_pool_bytes,
        "adapter_pool_bytes_on_accelerator": mem.adapter_pool_bytes_on_accelerator,
        "adapters_over_base_bytes": round(adapter_bytes / mem.base_weight_bytes, 4),
        "adapters_with_accelerator_pool_over_base_bytes": round(with_pool / mem.base_weight_bytes, 4),
        "kv_cache_mb": round(mem.kv_cache_bytes * mb, 1),
        "kv_copy_max_mb": round(mem.kv_copy_max_bytes * mb, 1),
        "total_mb": round(mem.total_bytes * mb, 1),
        "peak_rss_mb": round(rss_engine, 1),
        "peak_rss_with_peft_mb": round(rss_mb(), 1),
        "model": model_label,
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
        (f"decode {len(names)} adapters mixed", f"{r['mixed_tok_s']:.1f} tok/s", f"{', '.join(names)}"),
        ("  mixed / base", f"{r['mixed_over_base']:.3f}", "target >= 0.85, aim 0.95"),
        ("decode mixed, sampled", f"{r['mixed_sampling_tok_s']:.1f} tok/s",
         f"temperature {SAMPLING_TEMPERATURE}, top_p 0.95, top_k 50; / greedy = {r['mixed_sampling_over_mixed']:.3f}"),
    ]
    for c, lc in long_ctx.items():
        rows += [
            (f"decode at {c} tokens, base / mixed", f"{lc['base_tok_s']:.2f} / {lc['mixed_tok_s']:.2f} tok/s",
             f"batch {lc['batch']}, greedy; mixed / base = {lc['mixed_over_base']:.3f}"),
            ("  sampled, base / mixed", f"{lc['base_sampling_tok_s']:.2f} / {lc['mixed_sampling_tok_s']:.2f} tok/s",
             f"mixed / base = {lc['mixed_sampling_over_base_sampling']:.3f}"),
            ("  mixed, copies built at first decode", f"{lc['mixed_copy_at_decode_tok_s']:.2f} tok/s",
             f"gathered from the blocks (the engine before); now / then = {lc['copy_over_copy_at_decode']:.2f}x; "
             f"whole run {lc['mixed_wall_s']:.1f} s vs {lc['mixed_copy_at_decode_wall_s']:.1f} s"),
            ("  mixed, gathering the paged cache", f"{lc['mixed_gather_tok_s']:.2f} tok/s",
             f"contiguous copies / gather = {lc['copy_over_gather']:.2f}x; whole run {lc['mixed_gather_wall_s']:.1f} s"),
        ]
    for key, ratio in sweep.items():
        rank, count = key[1:].split("_x")
        rows.append((f"  grouped LoRA r{rank}, {count} adapters", f"{ratio:.3f}",
                     f"mixed / base; {sweep_bound[key]:.3f} if weight bytes set the pace"))
    rows += [
        ("TTFT uncached", f"{tt['uncached_s'] * 1e3:.1f} ms", f"{ttft_len}-token prompt, median of {ttft_repeats}"),
        ("TTFT cached", f"{tt['cached_s'] * 1e3:.1f} ms", f"same prompt again, {tt['cached_tokens']} tokens from cache"),
        ("  cached / uncached", f"{tt['cached_s'] / tt['uncached_s']:.3f}", "skipped (--no-ttft)" if a.no_ttft else ""),
        ("fp32 GEMM peak", f"{r['gemm_peak_gflop_s']:.2f} GFLOP/s", "2048^3 matmul, best of 10: the compute ceiling"),
        ("copy bandwidth", f"{r['copy_bandwidth_gb_s']:.2f} GB/s", "256 MiB STREAM-style copy (read + write), best of 10"),
        ("same matmuls alone", f"{r['matmul_peak_gflop_s']:.2f} GFLOP/s",
         f"[{a.batch}, in] x {len(weights)} weights ({stack_params / 1e6:.1f} M), "
         f"matmul {peak['matmul'] / 1e9:.2f} / engine linear {peak['linear'] / 1e9:.2f}"),
        ("mixed decode model FLOP/s", f"{r['mixed_decode_gflop_s']:.2f} GFLOP/s",
         f"{mixed_flops_tok / 1e6:.1f} MFLOP/token incl. LoRA; base {base_flops_s / 1e9:.2f} GFLOP/s"),
        ("  decode_flops_over_peak", f"{r['decode_flops_over_peak']:.3f}", "over the GEMM peak"),
        ("  over the same matmuls", f"{r['decode_flops_over_stack_matmuls']:.3f}", "what batch-16 matmuls allow"),
        ("mixed decode bytes/s", f"{r['mixed_decode_gb_s']:.2f} GB/s",
         f"{step_bytes / 2**20:.1f} MiB per step: weights, active adapters, KV read"),
        ("  decode_bytes_over_bandwidth", f"{r['decode_bytes_over_bandwidth']:.3f}", ""),
        ("PEFT mixed generate", f"{r['peft_mixed_tok_s']:.1f} tok/s" if peft_tps else "skipped",
         f"transformers + PEFT adapter_names, best of {peft_repeats}"),
        ("  mixed / PEFT", f"{r['mixed_over_peft']:.2f}x" if peft_tps else "-", ""),
        ("llama.cpp mixed", f"{r['llamacpp_mixed_tok_s']:.1f} tok/s" if llama_tps else "skipped",
         "llama-server, same adapters, per-request LoRA" if llama_tps else (llama_why or "")),
        ("  mixed / llama.cpp", f"{r['mixed_over_llamacpp']:.2f}x" if llama_tps else "-", ""),
        ("base weights", f"{r['base_weight_mb']:.1f} MB", f"{r['dtype']}"),
        ("  packed head copy", f"{r['packed_head_copy_mb']:.1f} MB",
         "tied embeddings: the output projection's copy packed for oneDNN (cpu_weight_packing)"),
        (f"adapters ({len(names)}), host", f"{r['adapters_mb']:.1f} MB",
         ", ".join(f"{k} {v * mb:.1f}" for k, v in mem.adapter_bytes.items())),
        ("  adapters / base", f"{r['adapters_over_base_bytes']:.4f}", "host copies"),
        ("LoRA slot pool", f"{mem.adapter_pool_bytes * mb:.1f} MB",
         f"{mem.adapter_slots} slots; on CPU slots read the host copies (nothing held twice)"),
        ("  on an accelerator", f"{mem.adapter_pool_bytes_on_accelerator * mb:.1f} MB",
         f"{mem.adapter_slots} slots x max rank x every module; (host + pool) / base = "
         f"{r['adapters_with_accelerator_pool_over_base_bytes']:.4f}"),
        ("KV cache", f"{r['kv_cache_mb']:.1f} MB", f"preallocated, {kv_tokens} tokens"),
        ("KV copies, at most", f"{r['kv_copy_max_mb']:.1f} MB",
         "contiguous K/V of long-context rows and spare buffers for reuse (decode_kv_copy_tokens)"),
        ("total held", f"{r['total_mb']:.1f} MB", "weights (+ packed head copy) + adapters + pool + KV + live KV copies (none now)"),
        ("peak RSS (engine)", f"{r['peak_rss_mb']:.1f} MB", f"with PEFT loaded: {r['peak_rss_with_peft_mb']:.1f} MB"),
        ("threads / wall", f"{threads} / {r['wall_s']:.1f} s", "torch threads for engine, PEFT and ceilings"),
        ("CPU share", f"{cpu_share:.2f}", "CPU time / (wall x threads); well under 1: a busy machine, noisy figures"),
    ]
    mode = "quick" if q else "full"
    print(f"macaron engine benchmark ({mode}), {model_label}: {stack_params / 1e6:.0f} M params in decode matmuls")
    print(table(rows))
    if llama_why:
        print(f"mixed_over_llamacpp is null: {llama_why}")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
