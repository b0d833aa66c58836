"""The LoRA math alone, per decoder layer, four ways: the engine's `lora_delta` with one shrink per
fused projection (`fused`: q/k/v and gate/up A stacked transposed) and with one shrink per module
from the same tensors (`per_module`); grouped by adapter with A as PEFT stores it (`grouped`, the
engine before fused shrinks); one masked dense matmul over stacked slots (`masked`, the engine
before grouping); next to the layer's base matmuls.

    python loadtest/bench_lora_math.py [--hidden 576 --intermediate 1536 --kv 192 --batch 16]

Defaults are SmolLM2-135M's shapes. Each figure is base time / (base + LoRA time) for 1, 2, 4
and 8 distinct adapters at ranks 8, 16 and 64 (rows split evenly, the four arms interleaved, best
of --repeats by thread CPU time, one thread): the mixed/base ceiling the LoRA math leaves, without
attention or sampling. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from macaron.engine.lora_adapter import LoRAAdapter
from macaron.engine.lora_manager import LoRAPool
from macaron.engine.models.layers import BatchContext, lora_delta
from macaron.engine.models.llama import LORA_MODULES, PROJECTIONS, ModelShape


def _best(fn, repeats: int, inner: int = 20) -> float:
    """Seconds per call, best of `repeats` rounds of `inner` calls, by this thread's CPU time (steadier
    than wall clock on a shared machine)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.thread_time()
        for _ in range(inner):
            fn()
        best = min(best, (time.thread_time() - t0) / inner)
    return best


ARMS = ("fused", "per_module", "grouped", "masked")


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
    shape = ModelShape(
        architecture="LlamaForCausalLM", vocab_size=8, hidden_size=h, intermediate_size=i, num_layers=1,
        num_heads=h // 64, num_kv_heads=kv // 64, head_dim=64, rms_norm_eps=1e-5, max_position_embeddings=64,
        tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
    )
    shapes = {m: shape.in_out(m) for m in LORA_MODULES}
    weights = {m: torch.randn(o, n) for m, (n, o) in shapes.items()}
    xs = {m: torch.randn(batch, n) for m, (n, o) in shapes.items()}
    outs = {m: torch.zeros(batch, o) for m, (n, o) in shapes.items()}
    fused_out = {p: torch.zeros(batch, sum(shape.in_out(m)[1] for m in ms)) for p, ms in PROJECTIONS.items()}
    fused_in = {p: xs[ms[0]] for p, ms in PROJECTIONS.items()}
    base = _best(lambda: [torch.mm(xs[m], weights[m].t()) for m in shapes], a.repeats)
    result: dict[str, dict[str, float]] = {arm: {} for arm in ARMS}
    print(f"base matmuls of one layer: {base * 1e3:.3f} ms (batch {batch}, hidden {h}, {a.threads} thread)")
    print("  rank  adapters  " + "  ".join(f"{arm:>10}" for arm in ARMS) + "   (base / (base + LoRA))")
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

            pool = LoRAPool(shape, count, torch.float32, torch.device("cpu"))
            for s in range(count):
                adapter = LoRAAdapter(
                    name=f"a{s}", path="-", rank=rank, target_modules=frozenset(shapes),
                    weights={(0, m): (a_w[m][s].clone(), bt_w[m][s]) for m in shapes},
                )
                pool.acquire(adapter)
            ctx = BatchContext(
                positions=torch.zeros(batch, dtype=torch.long), slot_mapping=torch.zeros(batch, dtype=torch.long),
                num_decode=batch, decode_kv_index=None, decode_mask=None, prefills=[],
                logits_index=torch.arange(batch), lora_segments=segments,
            )

            def engine(fused: bool):
                def run() -> None:
                    pool.fused_shrink = fused
                    for p in PROJECTIONS:
                        lora_delta(pool, p, 0, fused_in[p], fused_out[p], ctx)
                return run

            fns = {"fused": engine(True), "per_module": engine(False), "grouped": grouped, "masked": masked}
            times = dict.fromkeys(ARMS, float("inf"))
            for round_ in range(2):  # interleaved, order flipped, so that load from elsewhere skews all alike
                for arm in ARMS if round_ == 0 else ARMS[::-1]:
                    times[arm] = min(times[arm], _best(fns[arm], max(1, a.repeats // 2)))
            key = f"r{rank}_x{count}"
            for arm in ARMS:
                result[arm][key] = round(base / (base + times[arm]), 3)
            print(f"  {rank:>4}  {count:>8}  " + "  ".join(f"{result[arm][key]:>10.3f}" for arm in ARMS))
    print(json.dumps({"base_ms_per_layer": round(base * 1e3, 3), **result}))


if __name__ == "__main__":
    main()
