"""Decode at a long context, attention read two ways in one run: gathered from the paged cache
every step, or in place from each row's contiguous K/V copy (the engine's default).

    python loadtest/profile_decode.py --context 4096 --batch 8
    py-spy record --format raw -o prof.txt -- python loadtest/profile_decode.py --context 1024
    python loadtest/profile_decode.py --shares prof.txt    # attention's share of each arm's samples

Rows share one long random prefix (prefilled once per adapter, then served by the prefix cache)
and differ in their last 16 tokens, so the run times decode, not prefill. The arms alternate,
best of --repeats each. Under py-spy, each arm's samples sit below its own function
(`decode_gather`, `decode_copy`), so `--shares` splits the profile by arm. Progress to stderr;
the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import torch

from macaron.engine.args import EngineArgs
from macaron.engine.bench import engine_decode_tps, long_prompts, warm_prefix
from macaron.engine.engine import LLMEngine


def decode_gather(eng: LLMEngine, prompts, adapters, new_tokens: int) -> float:
    budget = eng.runner.contiguous.budget_tokens
    eng.runner.contiguous.budget_tokens = 0
    try:
        return engine_decode_tps(eng, prompts, adapters, new_tokens)
    finally:
        eng.runner.contiguous.budget_tokens = budget


def decode_copy(eng: LLMEngine, prompts, adapters, new_tokens: int) -> float:
    return engine_decode_tps(eng, prompts, adapters, new_tokens)


def shares(raw: Path) -> dict:
    """From py-spy's raw (collapsed) output: per arm, the share of samples inside `attention`, inside
    gathers from the paged cache (decode rows and prefill chunks), inside the in-place attention over
    the copies, building copies, and writing prefill chunks into them."""
    counts: dict[str, Counter] = {"decode_gather": Counter(), "decode_copy": Counter()}
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
                                ("attend_contiguous", "attend_contiguous"), ("copy_build", "acquire"),
                                ("linear", "linear"), ("lora", "lora_delta")):
                    if fn in names:
                        c[key] += int(n)
    return {
        arm: {k: round(v / c["all"], 3) for k, v in c.items() if k != "all"} | {"samples": c["all"]}
        for arm, c in counts.items()
        if c["all"]
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--context", type=int, default=1024, help="prompt tokens of every row")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--mixed", action="store_true", help="four adapters mixed (default: base only)")
    ap.add_argument("--shares", type=Path, help="print attention's share per arm from a py-spy raw profile, and exit")
    a = ap.parse_args()
    if a.shares:
        print(json.dumps(shares(a.shares)))
        return
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
    best = {"gather": 0.0, "copy": 0.0}
    for i in range(a.repeats):
        for arm in ("copy", "gather") if i % 2 == 0 else ("gather", "copy"):
            fn = decode_copy if arm == "copy" else decode_gather
            tps = fn(eng, prompts, adapters, a.new_tokens)
            print(f"  {arm}: {tps:.1f} tok/s", file=sys.stderr)
            best[arm] = max(best[arm], tps)
    result = {
        "context": a.context,
        "batch": a.batch,
        "mixed": a.mixed,
        "threads": torch.get_num_threads(),
        "gather_tok_s": round(best["gather"], 2),
        "copy_tok_s": round(best["copy"], 2),
        "copy_over_gather": round(best["copy"] / best["gather"], 2),
        "kv_copy_max_mb": round(eng.runner.contiguous.max_bytes / 2**20, 1),
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
