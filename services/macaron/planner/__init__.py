"""`macaron plan`: what a model and its LoRAs cost on GPUs, before anything is deployed.

From a Hugging Face `config.json` (dense, Qwen-MoE, GLM/DeepSeek-MoE, MLA) and PEFT
`adapter_config.json` files: base weight bytes, bytes of each adapter, of SGLang's LoRA slot
pool, KV-cache bytes per token, how many tokens of KV fit, and whether it fits at all. The same
formulas are checked against the embedded engine's own accounting on the models it can load.
"""

from macaron.planner.adapters import AdapterSpec, adapter_from_config, read_adapter_spec
from macaron.planner.architecture import Linear, ModelSpec, model_spec, read_model_spec
from macaron.planner.plan import GPUS, Plan, make_plan

__all__ = [
    "GPUS",
    "AdapterSpec",
    "Linear",
    "ModelSpec",
    "Plan",
    "adapter_from_config",
    "make_plan",
    "model_spec",
    "read_adapter_spec",
    "read_model_spec",
]
