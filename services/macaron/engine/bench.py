"""Decode throughput at a fixed batch: base vs four adapters mixed, vs PEFT's mixed-adapter generate.

    python -m macaron.engine.bench [--model-dir DIR --lora NAME=DIR ...] [--batch 16 --new-tokens 64]

Without a model the project's bench model (~106 M parameters, four rank-16 adapters) is used.
Decode tok/s counts only steps where every row decodes (prefill excluded); for PEFT, the time
of a 1-token generate (prefill) is subtracted from the full generate. Each figure is the best of
--repeats runs, base and mixed interleaved, so that other load on the machine skews less.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import torch

from macaron.engine.args import EngineArgs
from macaron.engine.engine import LLMEngine
from macaron.engine.models.llama import LORA_MODULES
from macaron.engine.protocol import GenerateRequest
from macaron.engine.sampling_params import SamplingParams


def _prompts(tokenizer, batch: int, prompt_len: int) -> list[list[int]]:
    base = tokenizer.encode("The quick brown fox jumps over the lazy dog. " * 64, add_special_tokens=False)
    return [base[i : i + prompt_len] for i in range(batch)]


def long_prompts(vocab: int, batch: int, context: int, seed: int = 0) -> list[list[int]]:
    """`batch` prompts of `context` tokens: one shared random prefix and a distinct 16-token tail
    each, so that a long-context decode figure needs one prefill per adapter (the prefix cache
    serves the rest), not one per row."""
    g = torch.Generator().manual_seed(seed)
    low = 16  # skip the first ids (special tokens live there)
    prefix = torch.randint(low, vocab, (context - 16,), generator=g).tolist()
    return [prefix + torch.randint(low, vocab, (16,), generator=g).tolist() for _ in range(batch)]


def warm_prefix(eng: LLMEngine, prompt: list[int], adapters: set[str | None]) -> None:
    """Prefills `prompt` once under each adapter (the prefix cache is per adapter)."""
    for adapter in adapters:
        params = SamplingParams(temperature=0, max_new_tokens=1, ignore_eos=True)
        rid = f"warm-{adapter}-{time.monotonic_ns()}"
        eng.add_request(GenerateRequest(rid=rid, prompt=prompt, sampling=params, lora_path=adapter))
        while eng.has_unfinished():
            eng.step()


def engine_decode_tps(
    eng: LLMEngine, prompts: list[list[int]], adapters: list[str | None], new_tokens: int, temperature: float = 0.0,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Decode tokens/s of these rows; greedy, or seeded top-p/top-k sampling at `temperature`.
    `clock`: wall time by default; `time.thread_time` counts this thread's CPU time only (the steps
    run here), the steadier figure when other jobs share the cores."""
    for i, (p, a) in enumerate(zip(prompts, adapters)):
        params = SamplingParams(temperature=0, max_new_tokens=new_tokens, ignore_eos=True)
        if temperature > 0:
            params = SamplingParams(
                temperature=temperature, top_p=0.95, top_k=50, sampling_seed=i, max_new_tokens=new_tokens, ignore_eos=True
            )
        eng.add_request(GenerateRequest(rid=f"b{time.monotonic_ns()}-{i}", prompt=p, sampling=params, lora_path=a))
    decode_time, decode_tokens = 0.0, 0
    while eng.has_unfinished():
        all_decode = not eng.scheduler.waiting and all(not s.is_prefilling for s in eng.scheduler.running)
        rows = len(eng.scheduler.running)
        t0 = clock()
        eng.step()
        if all_decode:
            decode_time += clock() - t0
            decode_tokens += rows
    return decode_tokens / decode_time if decode_time else 0.0


def write_random_adapters(
    model_dir: Path, out_dir: Path, *, count: int, rank: int, modules: tuple[str, ...] = LORA_MODULES, seed: int = 0
) -> dict[str, Path]:
    """`count` PEFT LoRA directories of `rank` for `model_dir`, random but loadable by PEFT and the
    engine: for benchmarks that need more adapters, or other ranks, than a model ships with."""
    import json

    from safetensors.torch import save_file

    from macaron.engine.models.llama import ModelShape, load_config

    shape = ModelShape.from_config(load_config(model_dir))
    g = torch.Generator().manual_seed(seed)
    made: dict[str, Path] = {}
    for n in range(count):
        tensors: dict[str, torch.Tensor] = {}
        for layer in range(shape.num_layers):
            for m in modules:
                in_f, out_f = shape.in_out(m)
                part = "mlp" if m in ("gate_proj", "up_proj", "down_proj") else "self_attn"
                key = f"base_model.model.model.layers.{layer}.{part}.{m}"
                tensors[f"{key}.lora_A.weight"] = torch.randn(rank, in_f, generator=g) / in_f**0.5
                tensors[f"{key}.lora_B.weight"] = torch.randn(out_f, rank, generator=g) * 0.01
        path = out_dir / f"r{rank}-{n}"
        path.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(path / "adapter_model.safetensors"))
        config = {"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "target_modules": list(modules),
                  "lora_dropout": 0.0, "bias": "none", "task_type": "CAUSAL_LM", "base_model_name_or_path": str(model_dir)}
        (path / "adapter_config.json").write_text(json.dumps(config))
        made[path.name] = path
    return made


def peft_decode_tps(
    model_dir: Path, adapters: dict[str, Path], prompts: list[list[int]], names: list[str], new_tokens: int, repeats: int
) -> float:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    first, *rest = adapters.items()
    model = PeftModel.from_pretrained(model, str(first[1]), adapter_name=first[0])
    for name, path in rest:
        model.load_adapter(str(path), adapter_name=name)
    model.eval()
    ids = torch.tensor(prompts)
    mask = torch.ones_like(ids)

    def run(n: int) -> float:
        t0 = time.perf_counter()
        with torch.inference_mode():
            model.generate(
                input_ids=ids, attention_mask=mask, adapter_names=names, max_new_tokens=n, min_new_tokens=n,
                do_sample=False, pad_token_id=0,
            )
        return time.perf_counter() - t0

    run(2)
    prefill = min(run(1) for _ in range(repeats))
    full = min(run(new_tokens) for _ in range(repeats))
    return len(prompts) * (new_tokens - 1) / (full - prefill)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-dir")
    ap.add_argument("--lora", action="append", default=[])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--no-peft", action="store_true")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: the engine's default)")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    if a.model_dir:
        model_dir = Path(a.model_dir)
        adapters = {k: Path(v) for k, v in (s.split("=", 1) for s in a.lora)}
    else:
        from macaron.assets import ensure_bench_model

        assets = ensure_bench_model()
        model_dir, adapters = assets.model_dir, dict(assets.adapters)
    eng = LLMEngine(
        EngineArgs(
            model_path=str(model_dir),
            lora_paths=[f"{k}={v}" for k, v in adapters.items()],
            max_running_requests=a.batch,
            max_total_tokens=max(65536, a.batch * (a.prompt_len + a.new_tokens) * 2),
            num_threads=a.threads or None,
        )
    )
    prompts = _prompts(eng.tokenizer, a.batch, a.prompt_len)
    names = list(adapters)
    mixed = [names[i % len(names)] for i in range(a.batch)]
    engine_decode_tps(eng, prompts[:2], [None, None], 4)  # warm-up
    base = mix = 0.0
    for _ in range(a.repeats):
        base = max(base, engine_decode_tps(eng, prompts, [None] * a.batch, a.new_tokens))
        mix = max(mix, engine_decode_tps(eng, prompts, mixed, a.new_tokens))
    print(f"engine base   decode: {base:8.1f} tok/s (batch {a.batch}, {torch.get_num_threads()} threads)")
    print(f"engine mixed  decode: {mix:8.1f} tok/s ({len(names)} adapters)  mixed/base = {mix / base:.3f}")
    if not a.no_peft:
        peft = peft_decode_tps(model_dir, adapters, prompts, mixed, a.new_tokens, a.repeats)
        print(f"PEFT   mixed  decode: {peft:8.1f} tok/s  engine/PEFT = {mix / peft:.2f}x")


if __name__ == "__main__":
    main()
