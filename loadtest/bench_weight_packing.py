"""Decode with and without CPU weight packing, in one run (issue 16): two engines on the same model
(`cpu_weight_packing` on and off), the same batch of greedy requests, base only and four adapters
mixed, the arms interleaved and alternated, best of --repeats.

    python loadtest/bench_weight_packing.py [--batch 16 --new-tokens 32 --repeats 3]

Tokens/s count decode steps only (every row decoding), by wall clock and by the engine thread's
CPU time (`time.thread_time`): on a shared machine the CPU time is the steadier figure, since
time spent descheduled is not in it. The last stdout line is one JSON object; it also says
whether both arms produced the same tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from macaron.engine.args import EngineArgs
from macaron.engine.bench import _prompts
from macaron.engine.engine import LLMEngine
from macaron.engine.protocol import GenerateRequest
from macaron.engine.sampling_params import SamplingParams


def decode(eng: LLMEngine, prompts: list[list[int]], adapters: list[str | None], new_tokens: int):
    """(cpu tok/s, wall tok/s, output ids by row) of one batch run to completion."""
    for i, (p, a) in enumerate(zip(prompts, adapters)):
        params = SamplingParams(temperature=0, max_new_tokens=new_tokens, ignore_eos=True)
        eng.add_request(GenerateRequest(rid=f"w{time.monotonic_ns()}-{i}", prompt=p, sampling=params, lora_path=a))
    cpu = wall = 0.0
    tokens = 0
    outs: dict[int, list[int]] = {}
    while eng.has_unfinished():
        all_decode = not eng.scheduler.waiting and all(not s.is_prefilling for s in eng.scheduler.running)
        rows = len(eng.scheduler.running)
        c0, w0 = time.thread_time(), time.perf_counter()
        for out in eng.step():
            if out.finished:
                outs[int(out.rid.rsplit("-", 1)[1])] = out.output_ids
        if all_decode:
            cpu += time.thread_time() - c0
            wall += time.perf_counter() - w0
            tokens += rows
    return tokens / cpu, tokens / wall, outs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    common = dict(max_running_requests=a.batch, num_threads=a.threads, max_total_tokens=8192)
    engines = {
        "plain": LLMEngine(EngineArgs(cpu_weight_packing=False, **common)),
        "packed": LLMEngine(EngineArgs(cpu_weight_packing=True, **common)),
    }
    first = engines["plain"]
    names = list(first.lora.adapters)
    prompts = _prompts(first.tokenizer, a.batch, a.prompt_len)
    rows = {"base": [None] * a.batch, "mixed": [names[i % len(names)] for i in range(a.batch)]}
    for eng in engines.values():
        decode(eng, prompts[:2], [None, None], 4)  # warm-up
    best: dict[str, tuple[float, float]] = {}
    outputs: dict[tuple[str, str], dict] = {}
    for r in range(a.repeats):
        for kind, adapters in rows.items():
            order = list(engines) if r % 2 == 0 else list(reversed(engines))
            for arm in order:
                cpu, wall, outs = decode(engines[arm], prompts, adapters, a.new_tokens)
                outputs[(arm, kind)] = outs
                key = f"{arm}_{kind}"
                best[key] = max(best.get(key, (0.0, 0.0)), (cpu, wall))
                print(f"  {key}: {cpu:.1f} tok/s (cpu), {wall:.1f} (wall)", flush=True)
    result = {
        "batch": a.batch,
        "threads": torch.get_num_threads(),
        "load_average": round(os.getloadavg()[0], 2),
        **{f"{k}_cpu_tok_s": round(v[0], 1) for k, v in best.items()},
        **{f"{k}_wall_tok_s": round(v[1], 1) for k, v in best.items()},
        **{f"packed_over_plain_{kind}_cpu": round(best[f"packed_{kind}"][0] / best[f"plain_{kind}"][0], 3) for kind in rows},
        "same_tokens": all(outputs[("plain", k)] == outputs[("packed", k)] for k in rows),
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
