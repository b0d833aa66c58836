"""A new version of a PEFT adapter with other weights (its B matrices scaled): for tests and benchmarks.

Real new versions come from training (`macaron adapters train`); this one is made in a second
from an existing adapter and still goes through the same load path (PEFT directory, safetensors).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from safetensors.torch import load_file, save_file

WEIGHTS = "adapter_model.safetensors"


def scaled_adapter(source: str | Path, target: str | Path, scale: float) -> Path:
    """Copies the adapter directory `source` to `target` with every `lora_B` tensor times `scale`."""
    source, target = Path(source), Path(target)
    if not (source / WEIGHTS).is_file():
        raise FileNotFoundError(f"{source} has no {WEIGHTS}: give a PEFT adapter directory")
    target.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        if item.is_file() and item.name != WEIGHTS:
            shutil.copy2(item, target / item.name)
    tensors = load_file(str(source / WEIGHTS))
    scaled = {k: (v * scale if "lora_B" in k else v).contiguous() for k, v in tensors.items()}
    save_file(scaled, str(target / WEIGHTS), metadata={"format": "pt"})
    return target
