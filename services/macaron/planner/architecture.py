"""A model's shape from its config.json: every linear module (for weights and LoRA), other
parameters, and the KV cache a token costs.

Families: Llama-like dense (Llama, Qwen2/3, Mistral), Qwen-MoE (num_experts, optional shared
expert), GLM/DeepSeek-MoE (n_routed_experts, n_shared_experts, first_k_dense_replace), Mixtral,
and multi-head latent attention (kv_lora_rank; GLM-5's DeepSeek-style sparse-attention indexer
included). Experts are modelled by one representative module name with a copy count, so a
256-expert, 78-layer model is a few thousand entries, not millions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "fp8": 1, "float8_e4m3fn": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
REFERENCE_DIR = Path(__file__).parent / "configs"


@dataclass(frozen=True)
class Linear:
    """One linear module of one layer: `copies` identical instances (experts) of in x out."""

    name: str
    """Full module name as PEFT sees it (experts: the first one's name)."""
    layer: int
    in_features: int
    out_features: int
    copies: int = 1
    bias: bool = False

    @property
    def kind(self) -> str:
        """Last name component: what target_modules lists (q_proj, gate_proj, w1, ...)."""
        return self.name.rsplit(".", 1)[-1]

    @property
    def params(self) -> int:
        return self.copies * (self.in_features * self.out_features + (self.out_features if self.bias else 0))


@dataclass
class ModelSpec:
    """What memory planning needs from a config.json."""

    name: str
    architecture: str
    dtype: str
    num_layers: int
    hidden_size: int
    vocab_size: int
    max_position_embeddings: int
    linears: list[Linear]
    other_params: int
    """Embeddings, lm_head, norms, routers that are not linear modules, biases of those."""
    kv_heads: int
    """KV heads of GQA attention (0 for MLA, whose latent is shared by all heads)."""
    kv_values_per_token_per_layer: int
    """Values cached per token per layer: 2 x kv_heads x head_dim, or MLA's latent + rope key."""
    notes: list[str] = field(default_factory=list)

    @property
    def num_params(self) -> int:
        return self.other_params + sum(lin.params for lin in self.linears)

    def weight_bytes(self, dtype: str | None = None) -> int:
        return self.num_params * DTYPE_BYTES[dtype or self.dtype]

    def kv_bytes_per_token(self, dtype: str | None = None, tp: int = 1) -> int:
        """KV-cache bytes one token costs on one GPU of a TP group: GQA heads split over the
        ranks while there are at least as many heads as ranks (else one head is replicated per
        rank); an MLA latent is replicated on every rank."""
        b = DTYPE_BYTES[dtype or self.dtype]
        per_layer = self.kv_values_per_token_per_layer
        if self.kv_heads:
            heads_per_rank = -(-self.kv_heads // tp) if tp <= self.kv_heads else 1
            per_layer = per_layer * heads_per_rank // self.kv_heads
        return self.num_layers * per_layer * b


def read_model_spec(source: str | Path) -> ModelSpec:
    """`source`: a model directory, a config.json, or the name of a bundled reference config."""
    path = Path(source)
    if path.is_dir():
        path = path / "config.json"
    elif not path.exists() and (REFERENCE_DIR / f"{source}.json").is_file():
        path = REFERENCE_DIR / f"{source}.json"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in REFERENCE_DIR.glob("*.json")))
        raise FileNotFoundError(f"no config.json at {source!r} (give a model directory, a config.json, or one of: {known})")
    cfg = json.loads(path.read_text())
    name = path.parent.name if path.name == "config.json" else path.stem
    return model_spec(cfg, name=name)


def model_spec(cfg: dict, name: str = "model") -> ModelSpec:
    """Builds the ModelSpec of a Hugging Face config dict."""
    if "hidden_size" not in cfg and isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg["text_config"], "architectures": cfg.get("architectures")}
    arch = (cfg.get("architectures") or [cfg.get("model_type", "unknown")])[0]
    model_type = str(cfg.get("model_type", ""))
    hidden, layers, vocab = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"]), int(cfg["vocab_size"])
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    if dtype not in DTYPE_BYTES:
        dtype = "bfloat16"
    linears: list[Linear] = []
    other = vocab * hidden + hidden  # embeddings, final norm
    if not cfg.get("tie_word_embeddings", False):
        other += vocab * hidden
    kv_values = 0
    kv_heads = 0
    notes: list[str] = []
    for i in range(layers):
        attn, attn_other, kv_values, kv_heads = _attention(cfg, i, hidden, model_type)
        mlp, mlp_other = _mlp(cfg, i, hidden, model_type)
        linears += attn + mlp
        other += attn_other + mlp_other + 2 * hidden  # input and post-attention norms
    if cfg.get("num_nextn_predict_layers"):
        notes.append(
            f"{cfg['num_nextn_predict_layers']} multi-token-prediction layer(s) not counted: "
            "loaded only with speculative decoding (add about one MoE layer each)"
        )
    if cfg.get("sliding_window") and cfg.get("use_sliding_window", model_type == "mistral"):
        notes.append("sliding-window layers counted as full attention (an upper bound on KV)")
    return ModelSpec(
        name=name,
        architecture=arch,
        dtype=dtype,
        num_layers=layers,
        hidden_size=hidden,
        vocab_size=vocab,
        max_position_embeddings=int(cfg.get("max_position_embeddings", 0) or 0),
        linears=linears,
        other_params=other,
        kv_heads=kv_heads,
        kv_values_per_token_per_layer=kv_values,
        notes=notes,
    )


def _attention(cfg: dict, i: int, hidden: int, model_type: str) -> tuple[list[Linear], int, int, int]:
    """(linears, other params, cached values per token, kv heads) of layer i's attention."""
    p = f"model.layers.{i}.self_attn."
    heads = int(cfg["num_attention_heads"])
    other = 0
    if cfg.get("kv_lora_rank"):  # multi-head latent attention
        kv_rank, rope = int(cfg["kv_lora_rank"]), int(cfg["qk_rope_head_dim"])
        nope, v = int(cfg["qk_nope_head_dim"]), int(cfg["v_head_dim"])
        q_rank = cfg.get("q_lora_rank")
        out: list[Linear] = []
        if q_rank:
            out += [Linear(p + "q_a_proj", i, hidden, q_rank), Linear(p + "q_b_proj", i, q_rank, heads * (nope + rope))]
            other += q_rank  # q_a_layernorm
        else:
            out.append(Linear(p + "q_proj", i, hidden, heads * (nope + rope)))
        out += [
            Linear(p + "kv_a_proj_with_mqa", i, hidden, kv_rank + rope),
            Linear(p + "kv_b_proj", i, kv_rank, heads * (nope + v)),
            Linear(p + "o_proj", i, heads * v, hidden),
        ]
        other += kv_rank  # kv_a_layernorm
        cached = kv_rank + rope
        if cfg.get("index_n_heads") and q_rank:  # DeepSeek sparse attention's lightning indexer
            ih, idim = int(cfg["index_n_heads"]), int(cfg["index_head_dim"])
            ix = p + "indexer."
            out += [
                Linear(ix + "wq_b", i, q_rank, ih * idim),
                Linear(ix + "wk", i, hidden, idim),
                Linear(ix + "weights_proj", i, hidden, ih),
            ]
            other += 2 * idim  # k_norm (LayerNorm weight and bias)
            cached += idim  # the indexer's key cache (one more key per token per layer)
        return out, other, cached, 0
    kv = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    bias = bool(cfg.get("attention_bias", model_type.startswith("qwen2")))
    out = [
        Linear(p + "q_proj", i, hidden, heads * head_dim, bias=bias),
        Linear(p + "k_proj", i, hidden, kv * head_dim, bias=bias),
        Linear(p + "v_proj", i, hidden, kv * head_dim, bias=bias),
        Linear(p + "o_proj", i, heads * head_dim, hidden, bias=bool(cfg.get("o_proj_bias", False))),
    ]
    if model_type.startswith("qwen3") or cfg.get("use_qk_norm"):
        other += 2 * head_dim
    return out, other, 2 * kv * head_dim, kv


def _num_experts(cfg: dict) -> int:
    return int(cfg.get("num_experts") or cfg.get("n_routed_experts") or cfg.get("num_local_experts") or 0)


def _is_moe_layer(cfg: dict, i: int) -> bool:
    if not _num_experts(cfg):
        return False
    if cfg.get("mlp_layer_types"):
        return cfg["mlp_layer_types"][i] == "sparse"
    if "first_k_dense_replace" in cfg:
        first, freq = int(cfg["first_k_dense_replace"]), int(cfg.get("moe_layer_freq", 1) or 1)
        return i >= first and (i - first) % freq == 0
    if i in (cfg.get("mlp_only_layers") or []):
        return False
    step = int(cfg.get("decoder_sparse_step", 1) or 1)
    return (i + 1) % step == 0


def _mlp(cfg: dict, i: int, hidden: int, model_type: str) -> tuple[list[Linear], int]:
    p = f"model.layers.{i}."
    if not _is_moe_layer(cfg, i):
        inter = int(cfg["intermediate_size"])
        bias = bool(cfg.get("mlp_bias", False))
        return [
            Linear(p + "mlp.gate_proj", i, hidden, inter, bias=bias),
            Linear(p + "mlp.up_proj", i, hidden, inter, bias=bias),
            Linear(p + "mlp.down_proj", i, inter, hidden, bias=bias),
        ], 0
    experts = _num_experts(cfg)
    if model_type == "mixtral":
        inter = int(cfg["intermediate_size"])
        e = p + "block_sparse_moe.experts.0."
        return [
            Linear(e + "w1", i, hidden, inter, copies=experts),
            Linear(e + "w3", i, hidden, inter, copies=experts),
            Linear(e + "w2", i, inter, hidden, copies=experts),
            Linear(p + "block_sparse_moe.gate", i, hidden, experts),
        ], 0
    inter = int(cfg.get("moe_intermediate_size") or cfg["intermediate_size"])
    e = p + "mlp.experts.0."
    out = [
        Linear(e + "gate_proj", i, hidden, inter, copies=experts),
        Linear(e + "up_proj", i, hidden, inter, copies=experts),
        Linear(e + "down_proj", i, inter, hidden, copies=experts),
    ]
    other = 0
    if "n_routed_experts" in cfg:  # GLM / DeepSeek: router weight and score-correction bias, shared experts
        other += experts * hidden + experts
        shared = int(cfg.get("n_shared_experts") or 0) * inter
        prefix = p + "mlp.shared_experts."
    else:  # Qwen-MoE: a linear router, an optional gated shared expert
        out.append(Linear(p + "mlp.gate", i, hidden, experts))
        shared = int(cfg.get("shared_expert_intermediate_size") or 0)
        prefix = p + "mlp.shared_expert."
        if shared:
            out.append(Linear(p + "mlp.shared_expert_gate", i, hidden, 1))
    if shared:
        out += [
            Linear(prefix + "gate_proj", i, hidden, shared),
            Linear(prefix + "up_proj", i, hidden, shared),
            Linear(prefix + "down_proj", i, shared, hidden),
        ]
    return out, other
