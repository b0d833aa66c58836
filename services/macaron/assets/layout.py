"""Where a built model lives in the cache, and the fingerprint that names its recipe.

A build lands in `<cache_dir>/models/<preset>-<fingerprint>/` with `model/`,
`adapters/<name>/` and a manifest. The fingerprint hashes everything that decides the bytes
(preset, corpus, chat template, RECIPE_VERSION), so a changed recipe builds into a new
directory instead of silently reusing an old one, and an old build stays readable by
processes that still use it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from macaron.assets.chat_template import CHAT_TEMPLATE
from macaron.assets.corpus import training_corpus
from macaron.assets.presets import ADAPTER_NAMES, LORA_TARGET_MODULES, ModelPreset

# Bump when the build code changes the bytes in a way the preset fields do not show
# (init scheme, file set, tokenizer options).
RECIPE_VERSION = 1
MANIFEST_NAME = "macaron-assets.json"


@dataclass(frozen=True)
class ModelAssets:
    """Paths of one built (or user-supplied) base model and its LoRA adapters."""

    model_dir: Path  # Hugging Face model directory (config, weights, tokenizer, chat template)
    adapters: dict[str, Path]  # adapter name -> PEFT adapter directory


def recipe_fingerprint(preset: ModelPreset) -> str:
    """Hex digest of everything that decides the built bytes."""
    recipe = {
        "recipe_version": RECIPE_VERSION,
        "preset": preset.fingerprint_fields(),
        "adapters": list(ADAPTER_NAMES),
        "lora_targets": list(LORA_TARGET_MODULES),
        "corpus": training_corpus(),
        "chat_template": CHAT_TEMPLATE,
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def build_dir_name(preset: ModelPreset) -> str:
    """`<preset>-<first 12 hex digits of the fingerprint>`."""
    return f"{preset.name}-{recipe_fingerprint(preset)[:12]}"


def assets_in(root: Path) -> ModelAssets:
    """The layout of a build rooted at `root` (whether or not it exists yet)."""
    return ModelAssets(model_dir=root / "model", adapters={name: root / "adapters" / name for name in ADAPTER_NAMES})


def is_complete(root: Path, preset: ModelPreset) -> bool:
    """True when `root` holds a finished build of this exact recipe (its manifest says so)."""
    try:
        manifest = json.loads((root / MANIFEST_NAME).read_text())
    except (OSError, ValueError):
        return False
    return manifest.get("fingerprint") == recipe_fingerprint(preset)
