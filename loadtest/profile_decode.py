"""Decode at a long context, attention read four ways in one run: gathered from the paged cache
every step; in place from each row's contiguous K/V copy built at its first decode step by
gathering the blocks (the engine before); each row over its own copy written as it prefills,
its prefix-cache part from a sibling's copy or from block runs (`per_row`, cascade attention
off); and the engine's default, the same copies with cascade attention, where the rows behind
one cached prefix read it once per group (`copy`); and the default with one LoRA shrink matmul
per module instead of one per fused projection (`per_module_shrink`, with --mixed).

    python loadtest/profile_decode.py --context 4096 --batch 8
    py-spy record --format raw -o prof.txt -- python loadtest/profile_decode.py --context 1024
    python loadtest/profile_decode.py --shares prof.txt    # attention's share of each arm's samples

Rows share one long random prefix (prefilled once per adapter, then served by the prefix cache)
and differ in their last 16 tokens, so the run times decode, not prefill. The arms alternate,
best of --repeats each; tokens/s counts decode steps only, wall_s is the whole arm (the rows'
16-token prefill chunks included, where copies are now built). Under py-spy, each arm's samples
sit below its own function (`decode_gather`, `decode_copy_at_decode`, `decode_per_row`,
`decode_per_module_shrink`, `decode_copy`), so
`--shares` splits the profile by arm. Progress to stderr;
the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

import torch

from macaron.engine.args import EngineArgs
from macaron.engine.bench import engine_decode_tps, long_prompts, warm_prefix
from macaron.engine.engine import LLMEngine


def _decode_with(owner: object, knob: str, value: object, eng: LLMEngine, prompts, adapters, new_tokens: int) -> float:
    """Decode tokens/s with `owner.knob` set to `value` for the run (restored after): one arm's switch."""
    before = getattr(owner, knob)
    setattr(owner, knob, value)
    try:
        return engine_decode_tps(eng, prompts, adapters, new_tokens, clock=CLOCK[0])
    finally:
        setattr(owner, knob, before)


def decode_gather(eng: LLMEngine, prompts, adapters, new_tokens: int) -> float:
    """No contiguous copies: every step gathers each row's context from the paged cache."""
    return _decode_with(eng.runner.contiguous, "budget_tokens", 0, eng, prompts, adapters, new_tokens)


def decode_copy(eng: LLMEngine, prompts, adapters, new_tokens: int) -> float:
    return engine_decode_tps(eng, prompts, adapters, new_tokens, clock=CLOCK[0])


def decode_per_row(eng: LLMEngine, prompts, adapters, new_tokens: int) -> float:
    """Each row attends over its own copy (cascade attention off: the engine before it)."""
    return _decode_with(eng.runner, "cascade_attention", False, eng, prompts, adapters, new_tokens)


def decode_per_module_shrink(eng: LLMEngine, prompts, adapters, new_tokens: int) -> float:
    """The default path but with one LoRA shrink matmul per module instead of one per fused projection."""
    return _decode_with(eng.lora.pool, "fused_shrink", False, eng, prompts, adapters, new_tokens)


def decode_copy_at_decode(eng: LLMEngine, prompts, adapters, new_tokens: int) -> float:
    """Copies as the engine made them before: only at the first decode step, gathered from the blocks."""
    return _decode_with(eng.runner.contiguous, "incremental", False, eng, prompts, adapters, new_tokens)


def shares(raw: Path) -> dict:
    """From py-spy's raw (collapsed) output: per arm, the share of samples inside `attention`, inside
    gathers from the paged cache (decode rows and prefill chunks), inside the in-place attention over
    the copies, building copies, and writing prefill chunks into them."""
    counts: dict[str, Counter] = {arm: Counter() for arm in ARMS.values()}
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        frames = stack.split(";")
        # py-spy names methods Class.method: compare the last part
        names = [f.split(" ")[0].rpartition(".")[2] for f in frames]
        for arm, c in counts.items():
            if arm in names:
                c["all"] += int(n)
                for key, fn in (("attention", "attention"), ("gather", "gather"),
                                ("attend_contiguous", "attend_contiguous"), ("cascade", "attend_cascade"),
                                ("copy_build", "acquire"),
                                ("linear", "linear"), ("lora", "lora_delta")):
                    if fn in names:
                        c[key] += int(n)
    return {
        arm: {k: round(v / c["all"], 3) for k, v in c.items() if k != "all"} | {"samples": c["all"]}
        for arm, c in counts.items()
        if c["all"]
    }


CLOCK = [time.perf_counter]
"""The clock decode tokens/s are timed by (--cpu-clock: this thread's CPU time)."""

ARMS = {
    "gather": "decode_gather",
    "copy_at_decode": "decode_copy_at_decode",
    "per_row": "decode_per_row",
    "per_module_shrink": "decode_per_module_shrink",
    "copy": "decode_copy",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--context", type=int, default=1024, help="prompt tokens of every row")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--mixed", action="store_true", help="four adapters mixed (default: base only)")
    ap.add_argument("--arms", default="gather,copy_at_decode,per_row,copy", help=f"comma-separated subset of {','.join(ARMS)}")
    ap.add_argument("--cpu-clock", action="store_true",
                    help="time decode steps by the engine thread's CPU time (steadier on a shared machine) instead of wall")
    ap.add_argument("--shares", type=Path, help="print attention's share per arm from a py-spy raw profile, and exit")
    a = ap.parse_args()
    if a.shares:
        print(json.dumps(shares(a.shares)))
        return
    if a.cpu_clock:
        CLOCK[0] = time.thread_time
    eng = LLMEngine(
        EngineArgs(
            max_running_requests=a.batch,
            max_total_tokens=5 * a.context + a.batch * (a.new_tokens + 64) + 1024,
            decode_kv_copy_tokens=a.batch * (a.context + a.new_tokens + 1024),  # rows share the prefix's blocks
        )
    )
    names = list(eng.lora.adapters)
    adapters = [names[i % len(names)] if a.mixed else None for i in range(a.batch)]
    prompts = long_prompts(eng.vocab_size, a.batch, a.context)
    print(f"prefilling the {a.context}-token prefix under {len(set(adapters))} adapter(s)", file=sys.stderr)
    warm_prefix(eng, prompts[0], set(adapters))
    every = {
        "gather": decode_gather, "copy_at_decode": decode_copy_at_decode, "per_row": decode_per_row,
        "per_module_shrink": decode_per_module_shrink, "copy": decode_copy,
    }
    fns = {arm: every[arm] for arm in a.arms.split(",")}
    best = dict.fromkeys(fns, 0.0)
    wall = dict.fromkeys(fns, float("inf"))
    for i in range(a.repeats):
        order = list(fns)[i % len(fns) :] + list(fns)[: i % len(fns)]
        for arm in order:
            t0 = time.perf_counter()
            tps = fns[arm](eng, prompts, adapters, a.new_tokens)
            wall[arm] = min(wall[arm], time.perf_counter() - t0)
            print(f"  {arm}: {tps:.1f} tok/s, {time.perf_counter() - t0:.1f} s", file=sys.stderr)
            best[arm] = max(best[arm], tps)
    result = {
        "context": a.context,
        "batch": a.batch,
        "mixed": a.mixed,
        "threads": torch.get_num_threads(),
        "clock": "thread CPU time" if a.cpu_clock else "wall",
        **{f"{arm}_tok_s": round(v, 2) for arm, v in best.items()},
        **{f"{arm}_wall_s": round(v, 2) for arm, v in wall.items()},
        **{
            f"copy_over_{arm}": round(best["copy"] / best[arm], 2)
            for arm in ("gather", "copy_at_decode", "per_row", "per_module_shrink")
            if arm in best and "copy" in best
        },
        "wall_copy_over_per_row": round(wall["copy"] / wall["per_row"], 2) if {"copy", "per_row"} <= set(wall) else None,
        "kv_copy_max_mb": round(eng.runner.contiguous.max_bytes / 2**20, 1),
        "built_tokens": eng.runner.contiguous.built_tokens,
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
