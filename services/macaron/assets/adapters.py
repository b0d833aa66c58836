"""Creates the four PEFT LoRA adapters with random, non-zero A and B matrices.

PEFT initialises B to zero (an adapter that changes nothing); these adapters must change the
greedy output visibly and differently from each other, so A and B are drawn from a generator
seeded per adapter name. B is sized so that the update is `lora_strength` times the
projection it adapts.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import PreTrainedModel

from macaron.assets.presets import ADAPTER_NAMES, LORA_TARGET_MODULES, ModelPreset


def base_model_name(preset: ModelPreset) -> str:
    """What adapter_config.json names as the base: the preset, never a machine path or Hub id."""
    return f"macaron-{preset.name}"


def lora_config(preset: ModelPreset) -> LoraConfig:
    """r, alpha and target modules of every built adapter."""
    return LoraConfig(
        r=preset.lora_rank,
        lora_alpha=preset.lora_alpha,
        target_modules=list(LORA_TARGET_MODULES),
        lora_dropout=0.0,
        bias="none",
        task_type="CAUSAL_LM",
        base_model_name_or_path=base_model_name(preset),
    )


def adapter_seed(preset: ModelPreset, name: str) -> int:
    """A seed per adapter, fixed by its position in ADAPTER_NAMES."""
    return preset.seed + 1000 * (1 + ADAPTER_NAMES.index(name))


@torch.no_grad()
def randomize_lora(peft_model: PeftModel, preset: ModelPreset, seed: int) -> None:
    """Draws every lora_A / lora_B of the active adapter, in sorted-name order."""
    generator = torch.Generator().manual_seed(seed)
    scaling = preset.lora_alpha / preset.lora_rank
    for name, param in sorted(peft_model.named_parameters()):
        if ".lora_A." in name:
            std = 1.0 / math.sqrt(param.shape[1])  # A·x keeps the scale of x
        elif ".lora_B." in name:
            # B·(A·x) * scaling has std lora_strength * layer_gain, as the base projection * strength
            std = preset.lora_strength * preset.layer_gain / (scaling * math.sqrt(param.shape[1]))
        else:
            continue
        param.copy_(torch.randn(param.shape, generator=generator, dtype=torch.float32) * std)


def attach_lora(base: PreTrainedModel, preset: ModelPreset) -> PeftModel:
    """Wraps `base` (modified in place) with one LoRA slot that `save_adapter` refills per name."""
    base.name_or_path = base_model_name(preset)  # PEFT records the model's name_or_path as the base
    return get_peft_model(base, lora_config(preset))


def save_adapter(peft_model: PeftModel, preset: ModelPreset, name: str, out_dir: Path) -> Path:
    """Draws the adapter `name` into the LoRA slot and saves it as `out_dir/name`."""
    randomize_lora(peft_model, preset, adapter_seed(preset, name))
    path = out_dir / name
    peft_model.save_pretrained(str(path))
    _normalize_saved_config(path)
    return path


def _normalize_saved_config(path: Path) -> None:
    """Makes the saved files reproducible: PEFT keeps target_modules in a set (hash-ordered per
    process), and writes a README model-card template that says nothing about these adapters."""
    config_path = path / "adapter_config.json"
    config = json.loads(config_path.read_text())
    if isinstance(config.get("target_modules"), list):
        config["target_modules"] = sorted(config["target_modules"])
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True))
    (path / "README.md").unlink(missing_ok=True)
