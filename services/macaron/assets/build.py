"""Builds one preset's files into an empty directory: tokenizer, model, adapters, manifest.

Deterministic: every random draw comes from a generator seeded by the preset, the tokenizer
trainer is deterministic for a fixed corpus, and the files carry no paths or timestamps, so
two builds on one machine give identical bytes. Publishing the result into the cache
(locking, atomic rename) is `cache.py`'s job, not this module's.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from tqdm.auto import tqdm

from macaron.assets.adapters import attach_lora, save_adapter
from macaron.assets.chat_template import END_OF_TEXT, IM_END
from macaron.assets.layout import MANIFEST_NAME, ModelAssets, assets_in, recipe_fingerprint
from macaron.assets.model import build_model, save_model
from macaron.assets.presets import ADAPTER_NAMES, ModelPreset
from macaron.assets.tokenizer import build_tokenizer


@contextmanager
def _quiet_libraries() -> Iterator[None]:
    """Hides transformers' per-file progress bars and PEFT's notices; our own bar reports."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(root: Path, preset: ModelPreset, num_parameters: int) -> None:
    """Recipe fingerprint, preset and a sha256 per file; written last, so it marks a finished build."""
    files = {
        str(path.relative_to(root)): _sha256(path)
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.name != MANIFEST_NAME
    }
    manifest = {
        "fingerprint": recipe_fingerprint(preset),
        "preset": preset.fingerprint_fields(),
        "num_parameters": num_parameters,
        "adapters": list(ADAPTER_NAMES),
        "files": files,
    }
    (root / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def build_assets(preset: ModelPreset, root: Path, progress: bool = True) -> ModelAssets:
    """Writes the model and its adapters under `root` (created if missing; should be empty)."""
    assets = assets_in(root)
    total_steps = 3 + len(ADAPTER_NAMES)  # tokenizer, model, each adapter, manifest
    with _quiet_libraries(), torch.random.fork_rng(devices=[]), tqdm(
        total=total_steps, desc=f"building {preset.name} model", unit="step", disable=not progress
    ) as bar:
        bar.set_postfix_str("tokenizer")
        tokenizer = build_tokenizer(assets.model_dir, preset.vocab_size, preset.max_position_embeddings)
        if len(tokenizer) != preset.vocab_size:
            raise RuntimeError(
                f"the corpus yields {len(tokenizer)} tokens, the preset asks for {preset.vocab_size}; "
                "lower vocab_size or add text to macaron/assets/corpus.py"
            )
        bar.update()
        bar.set_postfix_str("model")
        eos_ids = [tokenizer.convert_tokens_to_ids(END_OF_TEXT), tokenizer.convert_tokens_to_ids(IM_END)]
        model = build_model(preset, eos_token_ids=eos_ids, pad_token_id=tokenizer.pad_token_id)
        num_parameters = sum(p.numel() for p in model.parameters())
        save_model(model, assets.model_dir)
        bar.update()
        peft_model = attach_lora(model, preset)
        for name in ADAPTER_NAMES:
            bar.set_postfix_str(f"adapter {name}")
            save_adapter(peft_model, preset, name, root / "adapters")
            bar.update()
        bar.set_postfix_str("manifest")
        write_manifest(root, preset, num_parameters)
        bar.update()
    return assets
