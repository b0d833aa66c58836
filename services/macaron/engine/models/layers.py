"""The pieces of a decoder layer that know about batching: per-step metadata, wide-output linear,
per-row LoRA delta, RoPE, and attention over the paged KV cache.

A step's tokens are flat ([T, ...]): decode rows first (one token each), then prefill chunks.
Decode rows with a short context attend together in one SDPA call over their gathered cache
slots (padded, masked); rows with a long context read their own contiguous copy of the cache in
place (`macaron.engine.contiguous_kv`), and groups of them behind the same cached prefix read
that prefix once (`macaron.engine.cascade`); each prefill chunk attends on its own (plain causal when
it is the whole context; over its request's contiguous copy in place when it has one, else over
its gathered context).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import torch
import torch.nn.functional as F

from macaron.engine.cascade import CascadeGroup, attend_cascade
from macaron.engine.contiguous_kv import ContiguousKV, attend_contiguous

if TYPE_CHECKING:
    from macaron.engine.lora_manager import LoRAPool


class PrefillChunk(NamedTuple):
    """One prefill chunk of a step."""

    start: int
    """Index of its first token in the step's flat token list."""
    length: int
    kv_index: torch.Tensor | None
    """Cache slots of its whole context, to gather; None: it reads `copy`, or is the whole context."""
    mask: torch.Tensor | None
    """[1, 1, length, context] causal mask over its context; None: plain causal (the whole context)."""
    copy: ContiguousKV | None = None
    """The request's contiguous K/V copy: the chunk writes its K/V there and attends over it in place."""
    position: int = 0
    """Position of its first token in the request."""


@dataclass
class BatchContext:
    """Metadata of one forward pass over a flat list of tokens: decode rows first, then prefill chunks."""

    positions: torch.Tensor
    """[T] absolute position of each token."""
    slot_mapping: torch.Tensor
    """[T] flat KV-cache slot (block * block_size + offset) each token's K/V is written to."""
    num_decode: int
    """The first `num_decode` tokens are one decode row each."""
    decode_kv_index: torch.Tensor | None
    """[G, L] cache slots each gathered decode row attends to (padded); None: no gathered rows."""
    decode_mask: torch.Tensor | None
    """[G, 1, 1, L] True where a gathered decode row may attend."""
    prefills: list[PrefillChunk]
    """The prefill chunks, after the decode rows."""
    logits_index: torch.Tensor
    """[B] token index whose hidden state gives each sampled row's logits."""
    decode_gathered: torch.Tensor | None = None
    """Which decode rows the gathered tensors above are (indices); None: all of them."""
    decode_contiguous: list[tuple[int, ContiguousKV, int]] = field(default_factory=list)
    """(decode row, its contiguous K/V copy, the position it writes) of each long-context row."""
    decode_cascade: list[CascadeGroup] = field(default_factory=list)
    """Groups of long-context rows behind the same cached prefix (`macaron.engine.cascade`): each
    group reads the prefix once; its rows are not in `decode_contiguous`."""
    lora_segments: list[tuple[int, int, int]] | None = None
    """(adapter slot, first token, end token) of each run of tokens that share an adapter; base
    tokens are in no segment. None: no adapter rows this step."""


SMALL_BATCH_TOKENS = 64
OUT_CHUNK = 2048


PACKABLE_DTYPES = (torch.float32,)
"""Dtypes whose weights are packed for oneDNN on CPU (bf16 packing needs CPU features to check)."""


def pack_weight(w: torch.Tensor) -> torch.Tensor:
    """The weight [out, in] reordered once into oneDNN's blocked layout for `linear`, on CPU.

    On this engine's CPU hosts (one thread, batch 1-64) oneDNN with a prepacked weight runs the
    decode GEMMs 1.6-2.7x faster than F.linear on the plain row-major weight (MKL). Returns `w` unchanged where packing does not
    apply (another device or dtype, no oneDNN) or where a check against F.linear disagrees."""
    if w.device.type != "cpu" or w.dtype not in PACKABLE_DTYPES or not torch.backends.mkldnn.is_available():
        return w
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(w.detach(), SMALL_BATCH_TOKENS // 4)
        probe = torch.linspace(-1, 1, 2 * w.shape[1], dtype=w.dtype).view(2, -1)
        got = torch.ops.mkldnn._linear_pointwise(probe, packed, None, "none", [], "")
    except (RuntimeError, AttributeError, NotImplementedError):
        return w
    if not torch.allclose(got, F.linear(probe, w.detach()), rtol=1e-4, atol=1e-4):
        return w
    return packed


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """x @ w.T (+ b). A weight from `pack_weight` runs through oneDNN. A plain one uses F.linear,
    with wide outputs split in row chunks for decode-sized batches: MKL GEMMs with few rows and
    many outputs run measurably slower per byte than the same work in chunks."""
    if w.is_mkldnn:
        return torch.ops.mkldnn._linear_pointwise(x, w, b, "none", [], "")
    if x.shape[0] > SMALL_BATCH_TOKENS or w.shape[0] <= OUT_CHUNK:
        return F.linear(x, w, b)
    out = torch.cat([F.linear(x, part) for part in w.split(OUT_CHUNK)], dim=1)
    return out if b is None else out.add_(b)


def lora_delta(pool: LoRAPool, projection: str, layer: int, x: torch.Tensor, out: torch.Tensor, ctx: BatchContext) -> None:
    """out += per-row LoRA delta on one fused projection (`llama.PROJECTIONS`), grouped by adapter
    (S-LoRA / Punica's segmented GEMM): each run of rows multiplies by its own adapter at that
    adapter's rank; base rows pay nothing. Per run, one shrink matmul covers every module of the
    projection (their A stacked: `lora_adapter.LoRAShrink`), then each module's expand adds into its
    own columns. The scheduler orders decode rows by slot, so an adapter's rows are one run."""
    if not ctx.lora_segments:
        return
    fused = pool.fused_shrink
    for slot, start, end in ctx.lora_segments:
        lora = pool.slot_lora(slot, layer, projection)
        if lora is None:
            continue
        xs, part = x[start:end], out[start:end]
        if fused or len(lora.expands) == 1:
            xa = torch.mm(xs, lora.a_t)
            for ranks, cols, bt in lora.expands:
                (part if cols is None else part[:, cols]).addmm_(xa if ranks is None else xa[:, ranks], bt)
        else:  # one shrink per module (the path before fused shrinks; kept to compare)
            for ranks, cols, bt in lora.expands:
                part[:, cols].addmm_(torch.mm(xs, lora.a_t[:, ranks]), bt)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """HF's rotate-half RoPE; cos/sin are [T, head_dim]."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    rotated = torch.cat((-x2, x1), dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    ctx: BatchContext,
    scale: float,
    layer: int = 0,
) -> torch.Tensor:
    """Attention for decode rows (gathered and batched, or in place over each row's contiguous
    copy) and prefill chunks; returns [T, H, D]. `layer` picks the layer in the copies."""
    out = torch.empty_like(q)
    nd = ctx.num_decode
    if nd and ctx.decode_kv_index is not None:
        idx = ctx.decode_kv_index
        rows = ctx.decode_gathered
        kd = gather(k_cache, idx).transpose(1, 2)  # [G, Hkv, L, D]
        vd = gather(v_cache, idx).transpose(1, 2)
        qd = (q[:nd] if rows is None else q.index_select(0, rows)).unsqueeze(2)  # [G, H, 1, D]
        od = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=ctx.decode_mask, scale=scale, enable_gqa=True)
        if rows is None:
            out[:nd] = od.squeeze(2)
        else:
            out.index_copy_(0, rows, od.squeeze(2))
    for row, copy, pos in ctx.decode_contiguous:
        kv = copy.data[layer]
        kv[0, :, pos].copy_(k[row])
        kv[1, :, pos].copy_(v[row])
        out[row] = attend_contiguous(q[row], kv[0, :, : pos + 1], kv[1, :, : pos + 1], scale)
    for group in ctx.decode_cascade:
        suffixes = []
        for row, copy, pos in group.members:
            kv = copy.data[layer]
            kv[0, :, pos].copy_(k[row])
            kv[1, :, pos].copy_(v[row])
            suffixes.append(kv[:, :, group.prefix_len : pos + 1])
        prefix = group.leader.data[layer, :, :, : group.prefix_len]
        out.index_copy_(0, group.rows, attend_cascade(q.index_select(0, group.rows), prefix, suffixes, scale))
    for start, length, kv_index, mask, copy, position in ctx.prefills:
        qp = q[start : start + length].transpose(0, 1).unsqueeze(0)  # [1, H, n, D]
        if copy is not None:
            kv = copy.data[layer]
            kv[0, :, position : position + length].copy_(k[start : start + length].transpose(0, 1))
            kv[1, :, position : position + length].copy_(v[start : start + length].transpose(0, 1))
        if mask is None:
            kp = k[start : start + length].transpose(0, 1).unsqueeze(0)
            vp = v[start : start + length].transpose(0, 1).unsqueeze(0)
        elif copy is not None:  # the whole context in place, positions in order
            kp = kv[0, :, : position + length].unsqueeze(0)
            vp = kv[1, :, : position + length].unsqueeze(0)
        else:
            kp = gather(k_cache, kv_index).transpose(0, 1).unsqueeze(0)
            vp = gather(v_cache, kv_index).transpose(0, 1).unsqueeze(0)
        op = F.scaled_dot_product_attention(
            qp, kp, vp, attn_mask=mask, is_causal=mask is None, scale=scale, enable_gqa=True
        )
        out[start : start + length] = op.squeeze(0).transpose(0, 1)
    return out


def gather(cache: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """cache[index] for a [slots, H, D] cache; index_select on a 2-D view is several times faster."""
    flat = cache.view(cache.shape[0], -1).index_select(0, index.reshape(-1))
    return flat.view(*index.shape, *cache.shape[1:])
