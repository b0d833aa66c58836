"""The plan: per-GPU bytes of weights, LoRA slot pool and KV cache under SGLang's static memory
fraction, tokens of KV that fit, and whether the deployment fits at all.

Assumes SGLang tensor parallel over all `gpus` (weights and the LoRA pool split evenly; KV as
`ModelSpec.kv_bytes_per_token` says). GPU sizes are what the driver reports (MiB), not the
marketing figure.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from macaron.planner.adapters import AdapterSpec, pool_bytes
from macaron.planner.architecture import DTYPE_BYTES, ModelSpec

GIB = 2**30
GPUS: dict[str, int] = {
    "h200": 143771 * 2**20,
    "h100": 81559 * 2**20,
    "a100-80g": 81920 * 2**20,
    "a100-40g": 40960 * 2**20,
    "l40s": 46068 * 2**20,
}
"""Memory per GPU as nvidia-smi reports it (bytes)."""


@dataclass
class Plan:
    """Every figure `macaron plan` prints (bytes unless named otherwise)."""

    model: str
    architecture: str
    num_params: int
    dtype: str
    kv_dtype: str
    gpu: str
    gpus: int
    gpu_bytes: int
    mem_fraction_static: float
    base_weight_bytes: int
    adapter_bytes: dict[str, int]
    adapter_params: dict[str, int]
    adapter_host_bytes: int
    max_loras_per_batch: int
    lora_rank: int
    adapter_pool_bytes: int
    kv_bytes_per_token: int
    """Per GPU (the whole TP group holds this on every rank)."""
    weight_bytes_per_gpu: int
    adapter_pool_bytes_per_gpu: int
    static_bytes_per_gpu: int
    kv_budget_bytes_per_gpu: int
    kv_tokens: int
    context: int | None
    fits: bool
    why: str
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def make_plan(
    model: ModelSpec,
    adapters: list[AdapterSpec],
    *,
    gpu: str = "h200",
    gpus: int = 1,
    context: int | None = None,
    mem_fraction_static: float = 0.88,
    max_loras_per_batch: int = 8,
    max_lora_rank: int | None = None,
    dtype: str | None = None,
    kv_dtype: str | None = None,
) -> Plan:
    """The memory plan of `model` with `adapters` on `gpus` GPUs of kind `gpu`."""
    if gpu not in GPUS:
        raise ValueError(f"unknown gpu {gpu!r}; known: {', '.join(GPUS)}")
    if gpus < 1:
        raise ValueError("gpus must be at least 1")
    dtype = dtype or model.dtype
    kv_dtype = kv_dtype or dtype
    for d in (dtype, kv_dtype):
        if d not in DTYPE_BYTES:
            raise ValueError(f"unknown dtype {d!r}; known: {', '.join(DTYPE_BYTES)}")
    notes = list(model.notes)
    for a in adapters:
        missing = a.unmatched_targets(model)
        if missing:
            notes.append(f"adapter {a.name}: target(s) {', '.join(missing)} match no module of {model.architecture}")
    rank = max_lora_rank if max_lora_rank is not None else max((a.max_rank for a in adapters), default=0)
    weights = model.weight_bytes(dtype)
    adapter_bytes = {a.name: a.bytes(model, dtype) for a in adapters}
    pool = pool_bytes(model, adapters, max_loras_per_batch, rank, dtype)
    per_token = model.kv_bytes_per_token(kv_dtype, tp=gpus)
    gpu_bytes = GPUS[gpu]
    static = int(gpu_bytes * mem_fraction_static)
    w_gpu, pool_gpu = -(-weights // gpus), -(-pool // gpus)
    budget = static - w_gpu - pool_gpu
    tokens = max(budget, 0) // per_token if per_token else 0
    if budget <= 0:
        fits, why = False, (
            f"weights ({w_gpu / GIB:.1f} GiB) and LoRA pool ({pool_gpu / GIB:.2f} GiB) per GPU exceed the static "
            f"pool ({static / GIB:.1f} GiB): add GPUs, quantize, or lower max_loras_per_batch"
        )
    elif context is not None and tokens < context:
        hint = "add GPUs" if DTYPE_BYTES[kv_dtype] == 1 else "add GPUs or use an FP8 KV cache (--kv-dtype fp8_e4m3)"
        fits, why = False, f"{tokens:,} tokens of KV fit, fewer than one {context:,}-token context: {hint}"
    else:
        fits = True
        why = f"{tokens:,} tokens of KV" + (f" = {tokens / context:.1f} x a {context:,}-token context" if context else "")
    return Plan(
        model=model.name,
        architecture=model.architecture,
        num_params=model.num_params,
        dtype=dtype,
        kv_dtype=kv_dtype,
        gpu=gpu,
        gpus=gpus,
        gpu_bytes=gpu_bytes,
        mem_fraction_static=mem_fraction_static,
        base_weight_bytes=weights,
        adapter_bytes=adapter_bytes,
        adapter_params={a.name: a.num_params(model) for a in adapters},
        adapter_host_bytes=sum(adapter_bytes.values()),
        max_loras_per_batch=max_loras_per_batch,
        lora_rank=rank,
        adapter_pool_bytes=pool,
        kv_bytes_per_token=per_token,
        weight_bytes_per_gpu=w_gpu,
        adapter_pool_bytes_per_gpu=pool_gpu,
        static_bytes_per_gpu=static,
        kv_budget_bytes_per_gpu=budget,
        kv_tokens=tokens,
        context=context,
        fits=fits,
        why=why,
        notes=notes,
    )


def render(plan: Plan) -> str:
    """The plan as the lines `macaron plan` prints."""
    p = plan

    def gib(n: int) -> str:
        return f"{n / GIB:,.2f} GiB"

    lines = [
        f"model          {p.model} ({p.architecture}), {p.num_params / 1e9:,.2f} B params, {p.dtype}",
        f"gpus           {p.gpus} x {p.gpu} ({gib(p.gpu_bytes)} each), mem_fraction_static {p.mem_fraction_static}",
        f"base weights   {gib(p.base_weight_bytes)} total, {gib(p.weight_bytes_per_gpu)} per GPU",
    ]
    for name, size in p.adapter_bytes.items():
        lines.append(f"adapter        {name}: {p.adapter_params[name] / 1e6:,.1f} M params, {gib(size)} (host copy)")
    lines += [
        f"adapter pool   {p.max_loras_per_batch} slots x rank {p.lora_rank}: {gib(p.adapter_pool_bytes)} total, "
        f"{gib(p.adapter_pool_bytes_per_gpu)} per GPU",
        f"static pool    {gib(p.static_bytes_per_gpu)} per GPU",
        f"KV cache       {gib(p.kv_budget_bytes_per_gpu)} per GPU left; {p.kv_bytes_per_token:,} B per token per GPU ({p.kv_dtype})",
        f"KV tokens      {p.kv_tokens:,}",
        f"fits           {'yes' if p.fits else 'NO'}: {p.why}",
    ]
    lines += [f"note           {n}" for n in p.notes]
    return "\n".join(lines)
