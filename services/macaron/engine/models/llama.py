"""Llama / Qwen2 decoder in plain torch, reading Hugging Face weights, with per-row LoRA.

transformers' modules know nothing of a per-row adapter or of our paged KV cache, so the
engine has its own small implementation: RMSNorm, RoPE, GQA attention over the cache (one
SDPA call for the short-context decode rows, a grouped matmul over its own contiguous K/V copy
for each long-context row, one SDPA call per prefill chunk), SwiGLU MLP. q/k/v and gate/up are fused
into one matmul each, and so are their LoRA shrinks (`lora_adapter.LoRAShrink`); each module's expand
writes its own columns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from macaron.engine.models.layers import BatchContext, attention, linear, lora_delta, pack_weight, rope

if TYPE_CHECKING:
    from macaron.engine.lora_manager import LoRAPool

LORA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
PROJECTIONS: dict[str, tuple[str, ...]] = {
    "qkv": ("q_proj", "k_proj", "v_proj"),
    "o": ("o_proj",),
    "gate_up": ("gate_proj", "up_proj"),
    "down": ("down_proj",),
}
"""The projections as the decoder runs them (one matmul each): the modules of one read the same input
and write consecutive column ranges of its output, so their LoRA shrinks can be one matmul too."""
SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM")


@dataclass(frozen=True)
class ModelShape:
    """The dimensions the engine needs from config.json."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool
    mlp_bias: bool

    def in_out(self, module: str) -> tuple[int, int]:
        """(in_features, out_features) of a projection."""
        h, i = self.hidden_size, self.intermediate_size
        q, kv = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        return {
            "q_proj": (h, q),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (q, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }[module]

    def columns(self, projection: str) -> dict[str, tuple[int, int]]:
        """module -> (first, end) column of its part of a fused projection's output (`PROJECTIONS`)."""
        out: dict[str, tuple[int, int]] = {}
        start = 0
        for module in PROJECTIONS[projection]:
            width = self.in_out(module)[1]
            out[module] = (start, start + width)
            start += width
        return out

    @classmethod
    def from_config(cls, cfg: dict) -> "ModelShape":
        archs = cfg.get("architectures") or []
        arch = next((a for a in archs if a in SUPPORTED_ARCHITECTURES), None)
        if arch is None:
            raise ValueError(f"unsupported architecture {archs}; supported: {SUPPORTED_ARCHITECTURES}")
        if cfg.get("hidden_act", "silu") != "silu":
            raise ValueError(f"unsupported hidden_act {cfg.get('hidden_act')!r} (only silu)")
        if cfg.get("mlp_bias"):
            raise ValueError("mlp_bias=true is not supported")
        check_attention_config(cfg, arch)
        heads = cfg["num_attention_heads"]
        return cls(
            architecture=arch,
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
            max_position_embeddings=cfg.get("max_position_embeddings", 2048),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            attention_bias=bool(cfg.get("attention_bias", arch == "Qwen2ForCausalLM")),
            mlp_bias=False,
        )


STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")
"""RoPE variants whose frequencies do not depend on the sequence length: computed once, exact."""


def rope_type_of(cfg: dict) -> str:
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    return str(params.get("rope_type", params.get("type", "default")))


def check_attention_config(cfg: dict, arch: str) -> None:
    """Refuses configs this implementation would run silently wrong: sliding-window attention and
    RoPE scaling that changes with the sequence length (dynamic NTK, LongRoPE)."""
    window = cfg.get("sliding_window")
    uses_window = cfg.get("use_sliding_window", arch == "MistralForCausalLM")
    max_pos = cfg.get("max_position_embeddings", 2048)
    if uses_window and window is not None and int(window) < int(max_pos):
        raise ValueError(
            f"sliding_window={window} (< max_position_embeddings {max_pos}) is not supported by the embedded "
            f"engine: attention would see tokens the model never attends to. Serve this model with SGLang, or "
            f"use a checkpoint without a sliding window"
        )
    layer_types = cfg.get("layer_types") or []
    if any(t != "full_attention" for t in layer_types):
        raise ValueError(f"layer_types {sorted(set(layer_types))}: only full_attention layers are supported")
    rope_type = rope_type_of(cfg)
    if rope_type not in STATIC_ROPE_TYPES:
        raise ValueError(
            f"rope scaling type {rope_type!r} is not supported (supported: {', '.join(STATIC_ROPE_TYPES)}): its "
            f"frequencies change with the sequence length. Serve this model with SGLang, or drop rope_scaling "
            f"and keep prompts within the original context"
        )


def rope_inv_freq(config_dict: dict, head_dim: int) -> tuple[torch.Tensor, float]:
    """Inverse frequencies and attention scaling; scaled RoPE variants use transformers' own formulas."""
    params = config_dict.get("rope_parameters") or config_dict.get("rope_scaling") or {}
    rope_type = rope_type_of(config_dict)
    theta = params.get("rope_theta", config_dict.get("rope_theta", 10000.0))
    if rope_type == "default":
        inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        return inv, 1.0
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cfg = AutoConfig.for_model(**config_dict)
    inv, scaling = ROPE_INIT_FUNCTIONS[rope_type](cfg)
    return inv.float(), float(scaling)


class DecoderLayer(nn.Module):
    def __init__(self, shape: ModelShape, index: int, dtype: torch.dtype) -> None:
        super().__init__()
        s = shape
        self.index = index
        self.shape = s
        q, kv = s.num_heads * s.head_dim, s.num_kv_heads * s.head_dim
        self.q_size, self.kv_size = q, kv
        self.input_norm = nn.Parameter(torch.ones(s.hidden_size, dtype=dtype))
        self.post_norm = nn.Parameter(torch.ones(s.hidden_size, dtype=dtype))
        self.qkv = nn.Parameter(torch.empty(q + 2 * kv, s.hidden_size, dtype=dtype))
        self.qkv_bias = nn.Parameter(torch.zeros(q + 2 * kv, dtype=dtype)) if s.attention_bias else None
        self.o = nn.Parameter(torch.empty(s.hidden_size, q, dtype=dtype))
        self.o_bias: nn.Parameter | None = None
        self.gate_up = nn.Parameter(torch.empty(2 * s.intermediate_size, s.hidden_size, dtype=dtype))
        self.down = nn.Parameter(torch.empty(s.hidden_size, s.intermediate_size, dtype=dtype))
        self.scale = s.head_dim**-0.5

    def pack(self) -> list[torch.Tensor]:
        """Replaces the four projection matrices by their packed form (`pack_weight`); returns the
        packed tensors that replaced a parameter."""
        return [t for name in ("qkv", "o", "gate_up", "down") if (t := _pack_parameter(self, name)) is not None]

    def forward(
        self,
        h: torch.Tensor,
        residual: torch.Tensor | None,
        cos: torch.Tensor,
        sin: torch.Tensor,
        ctx: BatchContext,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        pool: LoRAPool | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        s = self.shape
        T = h.shape[0]
        residual = h if residual is None else residual + h
        x = F.rms_norm(residual, (s.hidden_size,), self.input_norm, s.rms_norm_eps)
        qkv = linear(x, self.qkv, self.qkv_bias)
        if pool is not None:
            lora_delta(pool, "qkv", self.index, x, qkv, ctx)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = rope(q.view(T, s.num_heads, s.head_dim), cos, sin)
        k = rope(k.view(T, s.num_kv_heads, s.head_dim), cos, sin)
        v = v.view(T, s.num_kv_heads, s.head_dim)
        k_cache.index_copy_(0, ctx.slot_mapping, k)
        v_cache.index_copy_(0, ctx.slot_mapping, v)
        attn = attention(q, k, v, k_cache, v_cache, ctx, self.scale, self.index).reshape(T, self.q_size)
        out = linear(attn, self.o, self.o_bias)
        if pool is not None:
            lora_delta(pool, "o", self.index, attn, out, ctx)
        residual = residual + out
        x = F.rms_norm(residual, (s.hidden_size,), self.post_norm, s.rms_norm_eps)
        gu = linear(x, self.gate_up)
        if pool is not None:
            lora_delta(pool, "gate_up", self.index, x, gu, ctx)
        gate, up = gu.chunk(2, dim=-1)
        act = F.silu(gate).mul_(up)
        out = linear(act, self.down)
        if pool is not None:
            lora_delta(pool, "down", self.index, act, out, ctx)
        return out, residual


class CausalLM(nn.Module):
    """The whole decoder; `forward` returns logits of the rows that sample."""

    def __init__(self, shape: ModelShape, config_dict: dict, dtype: torch.dtype) -> None:
        super().__init__()
        self.shape = shape
        self.embed = nn.Parameter(torch.empty(shape.vocab_size, shape.hidden_size, dtype=dtype))
        self.layers = nn.ModuleList(DecoderLayer(shape, i, dtype) for i in range(shape.num_layers))
        self.norm = nn.Parameter(torch.ones(shape.hidden_size, dtype=dtype))
        self.lm_head = (
            self.embed if shape.tie_word_embeddings else nn.Parameter(torch.empty(shape.vocab_size, shape.hidden_size, dtype=dtype))
        )
        inv_freq, attn_scaling = rope_inv_freq(config_dict, shape.head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.attn_scaling = attn_scaling
        self.packed: list[torch.Tensor] = []
        """Packed weights that replaced a parameter (same bytes, another layout)."""
        self.packed_head_copy: torch.Tensor | None = None
        """With tied embeddings, the output projection's packed copy (the embedding lookup keeps the plain one)."""

    def pack_weights(self) -> None:
        """Packs every matrix a step multiplies by for the CPU (`layers.pack_weight`); a no-op where
        packing does not apply. Call after moving the model to its device."""
        for layer in self.layers:
            self.packed += layer.pack()
        if self.shape.tie_word_embeddings:
            head = pack_weight(self.embed.data)
            if head is not self.embed.data:
                delattr(self, "lm_head")  # the embedding itself, registered under a second name
                self.lm_head = head
                self.packed_head_copy = head
        elif (head := _pack_parameter(self, "lm_head")) is not None:
            self.packed.append(head)

    @property
    def weight_bytes(self) -> int:
        """Bytes of the model's weights, plain and packed (each counted once; not the tied head's copy)."""
        params = sum(p.nbytes for p in {id(p): p for p in self.parameters()}.values())
        return params + sum(t.numel() * t.element_size() for t in self.packed)

    @property
    def packed_head_copy_bytes(self) -> int:
        t = self.packed_head_copy
        return 0 if t is None else t.numel() * t.element_size()

    def rope_cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions[:, None].float() * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.attn_scaling).to(dtype), (emb.sin() * self.attn_scaling).to(dtype)

    def forward(
        self,
        input_ids: torch.Tensor,
        ctx: BatchContext,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        pool: LoRAPool | None,
    ) -> torch.Tensor:
        h = F.embedding(input_ids, self.embed)
        cos, sin = self.rope_cos_sin(ctx.positions, h.dtype)
        residual = None
        for layer, (k_cache, v_cache) in zip(self.layers, kv_caches):
            h, residual = layer(h, residual, cos, sin, ctx, k_cache, v_cache, pool)
        hidden = (residual + h)[ctx.logits_index]
        hidden = F.rms_norm(hidden, (self.shape.hidden_size,), self.norm, self.shape.rms_norm_eps)
        return linear(hidden, self.lm_head).float()


def load_config(model_dir: Path) -> dict:
    return json.loads((model_dir / "config.json").read_text())


def _pack_parameter(module: nn.Module, name: str) -> torch.Tensor | None:
    """Swaps parameter `name` of `module` for its packed form; None (nothing changed) when packing does not apply."""
    plain = getattr(module, name)
    packed = pack_weight(plain.data)
    if packed is plain.data:
        return None
    delattr(module, name)
    setattr(module, name, packed)
    return packed


def load_model(model_dir: Path, dtype: torch.dtype, device: torch.device, pack: bool = False) -> CausalLM:
    """Builds CausalLM from a Hugging Face directory (single or sharded safetensors); `pack`:
    reorder the matrices for the CPU's GEMM (`CausalLM.pack_weights`)."""
    from safetensors import safe_open

    cfg = load_config(model_dir)
    shape = ModelShape.from_config(cfg)
    model = CausalLM(shape, cfg, dtype)
    index_file = model_dir / "model.safetensors.index.json"
    if index_file.is_file():
        files = sorted(set(json.loads(index_file.read_text())["weight_map"].values()))
    else:
        files = sorted(p.name for p in model_dir.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {model_dir}")
    tensors: dict[str, torch.Tensor] = {}
    for name in files:
        with safe_open(str(model_dir / name), framework="pt") as f:
            for key in f.keys():
                tensors[key] = f.get_tensor(key)
    _assign(model, tensors, shape, dtype)
    model = model.to(device).eval()
    if pack:
        model.pack_weights()
    return model


def _assign(model: CausalLM, t: dict[str, torch.Tensor], shape: ModelShape, dtype: torch.dtype) -> None:
    used: set[str] = set()

    def take(key: str) -> torch.Tensor:
        if key not in t:
            raise KeyError(f"checkpoint lacks {key}")
        used.add(key)
        return t[key].to(dtype)

    with torch.no_grad():
        model.embed.copy_(take("model.embed_tokens.weight"))
        model.norm.copy_(take("model.norm.weight"))
        if not shape.tie_word_embeddings:
            model.lm_head.copy_(take("lm_head.weight"))
        elif "lm_head.weight" in t:
            used.add("lm_head.weight")
        for i, layer in enumerate(model.layers):
            p = f"model.layers.{i}."
            layer.input_norm.copy_(take(p + "input_layernorm.weight"))
            layer.post_norm.copy_(take(p + "post_attention_layernorm.weight"))
            layer.qkv.copy_(torch.cat([take(p + f"self_attn.{n}_proj.weight") for n in "qkv"]))
            if layer.qkv_bias is not None:
                layer.qkv_bias.copy_(torch.cat([take(p + f"self_attn.{n}_proj.bias") for n in "qkv"]))
            layer.o.copy_(take(p + "self_attn.o_proj.weight"))
            if p + "self_attn.o_proj.bias" in t:
                layer.o_bias = nn.Parameter(take(p + "self_attn.o_proj.bias"))
            layer.gate_up.copy_(torch.cat([take(p + "mlp.gate_proj.weight"), take(p + "mlp.up_proj.weight")]))
            layer.down.copy_(take(p + "mlp.down_proj.weight"))
    unused = [k for k in t if k not in used and "rotary_emb" not in k]
    if unused:
        raise ValueError(f"checkpoint has weights this implementation does not use: {unused[:5]}")
