"""`macaron plan`: the memory plan of a model plus its LoRAs on GPUs (no GPU needed to run it)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds the `plan` subcommand to the `macaron` parser."""
    parser = subparsers.add_parser(
        "plan",
        help="memory plan: weights, LoRA slots, KV tokens that fit on N GPUs",
        description="From a Hugging Face config.json and PEFT adapter_config.json files: base weight "
        "bytes, each adapter's bytes, SGLang's LoRA slot pool, KV-cache bytes per token, how many "
        "tokens of KV fit, and whether it fits at all (tensor parallel over all GPUs).",
    )
    parser.add_argument("--model", required=True, help="Model directory, config.json, or a bundled reference name.")
    parser.add_argument("--adapters", nargs="*", default=[], metavar="[NAME=]PATH",
                        help="PEFT adapter directories or adapter_config.json files.")
    parser.add_argument("--lora-rank", type=int, help="Without adapter files: plan for adapters of this rank ...")
    parser.add_argument("--lora-target-modules", nargs="*", default=["q_proj", "k_proj", "v_proj", "o_proj"],
                        help="... on these modules (with --lora-rank).")
    parser.add_argument("--num-adapters", type=int, default=4, help="... this many of them (with --lora-rank).")
    parser.add_argument("--gpu", default="h200", help="GPU kind (h200, h100, a100-80g, a100-40g, l40s).")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs in one tensor-parallel group.")
    parser.add_argument("--context", type=int, help="Tokens one request must be able to hold.")
    parser.add_argument("--mem-fraction-static", type=float, default=0.88, help="SGLang's --mem-fraction-static.")
    parser.add_argument("--max-loras-per-batch", type=int, default=8, help="SGLang's LoRA slots on the GPU.")
    parser.add_argument("--max-lora-rank", type=int, help="Rank the pool is sized for (default: the largest adapter's).")
    parser.add_argument("--dtype", help="Weight dtype (default: the config's torch_dtype).")
    parser.add_argument("--kv-dtype", help="KV-cache dtype, e.g. fp8_e4m3 (default: the weight dtype).")
    parser.add_argument("--json", action="store_true", help="Print the plan as one JSON object.")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from macaron.planner.adapters import AdapterSpec, read_adapter_spec
    from macaron.planner.architecture import read_model_spec
    from macaron.planner.plan import make_plan, render

    try:
        model = read_model_spec(args.model)
        adapters = [read_adapter_spec(a) for a in args.adapters]
        if args.lora_rank:
            adapters += [
                AdapterSpec(name=f"rank{args.lora_rank}-{i}", rank=args.lora_rank, target_modules=tuple(args.lora_target_modules))
                for i in range(args.num_adapters)
            ]
        plan = make_plan(
            model, adapters, gpu=args.gpu, gpus=args.gpus, context=args.context,
            mem_fraction_static=args.mem_fraction_static, max_loras_per_batch=args.max_loras_per_batch,
            max_lora_rank=args.max_lora_rank, dtype=args.dtype, kv_dtype=args.kv_dtype,
        )
    except KeyError as exc:
        print(f"macaron plan: the config lacks {exc}; is it a decoder-only Hugging Face config.json?", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"macaron plan: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(plan.to_dict()) if args.json else render(plan))
    return 0 if plan.fits else 1
