"""The LoRA math alone, per decoder layer: grouped by adapter (the engine's path) vs one masked
dense matmul over stacked slots (the engine's previous path), next to the layer's base matmuls.

    python loadtest/bench_lora_math.py [--hidden 576 --intermediate 1536 --kv 192 --batch 16]

Defaults are SmolLM2-135M's shapes. Each figure is base time / (base + LoRA time) for 1, 2, 4
and 8 distinct adapters at ranks 8, 16 and 64 (rows split evenly, best of --repeats, one
thread): the mixed/base ceiling the LoRA math leaves, without attention or sampling. The last
line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def _best(fn, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


@torch.inference_mode()
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hidden", type=int, default=576)
    ap.add_argument("--intermediate", type=int, default=1536)
    ap.add_argument("--kv", type=int, default=192, help="k/v projection width (kv heads x head dim)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    h, i, kv, batch = a.hidden, a.intermediate, a.kv, a.batch
    shapes = {"q": (h, h), "k": (h, kv), "v": (h, kv), "o": (h, h), "gate": (h, i), "up": (h, i), "down": (i, h)}
    weights = {m: torch.randn(o, n) for m, (n, o) in shapes.items()}
    xs = {m: torch.randn(batch, n) for m, (n, o) in shapes.items()}
    outs = {m: torch.zeros(batch, o) for m, (n, o) in shapes.items()}
    base = _best(lambda: [torch.mm(xs[m], weights[m].t()) for m in shapes], a.repeats)
    result: dict[str, dict[str, float]] = {"grouped": {}, "masked": {}}
    print(f"base matmuls of one layer: {base * 1e3:.3f} ms (batch {batch}, hidden {h}, {a.threads} thread)")
    print("  rank  adapters  grouped  masked   (base / (base + LoRA))")
    for rank in (8, 16, 64):
        for count in (1, 2, 4, 8):
            a_w = {m: [torch.randn(rank, n) for _ in range(count)] for m, (n, o) in shapes.items()}
            bt_w = {m: [torch.randn(rank, o) for _ in range(count)] for m, (n, o) in shapes.items()}
            per = batch // count
            segments = [(s, s * per, (s + 1) * per if s < count - 1 else batch) for s in range(count)]

            def grouped() -> None:
                for m in shapes:
                    for s, start, end in segments:
                        outs[m][start:end].addmm_(torch.mm(xs[m][start:end], a_w[m][s].t()), bt_w[m][s])

            stacked_a = {m: torch.cat(a_w[m]) for m in shapes}
            stacked_bt = {m: torch.cat(bt_w[m]) for m in shapes}
            row_slot = torch.tensor([s for s, start, end in segments for _ in range(start, end)])
            mask = ((torch.arange(count * rank) // rank)[None, :] == row_slot[:, None]).float()

            def masked() -> None:
                for m in shapes:
                    outs[m].addmm_(torch.mm(xs[m], stacked_a[m].t()).mul_(mask), stacked_bt[m])

            g, k = _best(grouped, a.repeats), _best(masked, a.repeats)
            key = f"r{rank}_x{count}"
            result["grouped"][key] = round(base / (base + g), 3)
            result["masked"][key] = round(base / (base + k), 3)
            print(f"  {rank:>4}  {count:>8}  {result['grouped'][key]:.3f}    {result['masked'][key]:.3f}")
    print(json.dumps({"base_ms_per_layer": round(base * 1e3, 3), **result}))


if __name__ == "__main__":
    main()
