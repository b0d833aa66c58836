"""Creates the random-weight Llama causal LM and saves it in Hugging Face format.

Weights are drawn by our own seeded generator, parameter by parameter in name order, so the
bytes do not depend on transformers' init code; the scales come from the preset (why they are
not a trained model's scales: see `ModelPreset`).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from macaron.assets.presets import ModelPreset


def llama_config(preset: ModelPreset, eos_token_id: int, pad_token_id: int) -> LlamaConfig:
    """The model's config: GQA Llama, fp32, untied embeddings, no BOS token (ChatML has none)."""
    return LlamaConfig(
        vocab_size=preset.vocab_size,
        hidden_size=preset.hidden_size,
        intermediate_size=preset.intermediate_size,
        num_hidden_layers=preset.num_hidden_layers,
        num_attention_heads=preset.num_attention_heads,
        num_key_value_heads=preset.num_key_value_heads,
        head_dim=preset.hidden_size // preset.num_attention_heads,
        max_position_embeddings=preset.max_position_embeddings,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        dtype="float32",
        architectures=["LlamaForCausalLM"],
    )


@torch.no_grad()
def init_weights(model: torch.nn.Module, preset: ModelPreset) -> None:
    """Overwrites every parameter from one seeded generator, in sorted-name order."""
    generator = torch.Generator().manual_seed(preset.seed)
    for name, param in sorted(model.named_parameters()):
        if name.endswith("norm.weight"):
            param.fill_(1.0)
            continue
        if name.endswith("embed_tokens.weight"):
            std = preset.embedding_std
        elif name.endswith("lm_head.weight"):
            std = preset.logit_std / math.sqrt(param.shape[1])
        else:
            std = preset.layer_gain / math.sqrt(param.shape[1])
        param.copy_(torch.randn(param.shape, generator=generator, dtype=torch.float32) * std)


def build_model(preset: ModelPreset, eos_token_ids: list[int], pad_token_id: int) -> LlamaForCausalLM:
    """The initialised model (fp32, eval mode) with a greedy-by-default generation config."""
    config = llama_config(preset, eos_token_id=eos_token_ids[0], pad_token_id=pad_token_id)
    model = LlamaForCausalLM(config).to(torch.float32).eval()
    init_weights(model, preset)
    model.generation_config = GenerationConfig(
        eos_token_id=eos_token_ids, pad_token_id=pad_token_id, bos_token_id=None, do_sample=False
    )
    return model


def save_model(model: LlamaForCausalLM, out_dir: Path) -> None:
    """config.json, generation_config.json and one fp32 model.safetensors."""
    model.save_pretrained(str(out_dir), max_shard_size="100GB")
