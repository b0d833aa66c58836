"""Size presets of the built model: one recipe, two sizes (tests and benchmarks).

Every number that decides the built bytes lives here (or in the corpus and chat template),
so the recipe fingerprint in `layout.py` changes whenever one of them does.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

ADAPTER_NAMES: tuple[str, ...] = ("chat", "agent", "code", "ui")
LORA_TARGET_MODULES: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class ModelPreset:
    """Shape and initialisation of one built model and its adapters.

    The init scales are not a trained model's: they make greedy decoding decisive (a wide gap
    between the top two logits) and context-dependent, which is what tests of an engine need.
    """

    name: str
    vocab_size: int  # tokenizer entries; the model's vocabulary is exactly the tokenizer's
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int  # fewer than attention heads: grouped-query attention
    max_position_embeddings: int = 2048
    seed: int = 1234
    embedding_std: float = 1.0  # token embeddings are unit scale, like the residual stream
    layer_gain: float = 1.0  # projections have std gain/sqrt(fan_in): roughly norm-preserving
    logit_std: float = 512.0  # lm_head std * sqrt(hidden): the spread of the logits (see `probe.py`)
    lora_rank: int = 8
    lora_alpha: int = 16
    lora_strength: float = 0.5  # size of an adapter's update relative to the projection it adapts

    def fingerprint_fields(self) -> dict[str, Any]:
        """Every field, for the recipe fingerprint."""
        return asdict(self)


TINY = ModelPreset(
    name="tiny",
    vocab_size=1536,
    hidden_size=64,
    intermediate_size=192,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
)

BENCH = ModelPreset(
    name="bench",
    vocab_size=1536,
    hidden_size=768,
    intermediate_size=3072,
    num_hidden_layers=12,
    num_attention_heads=12,
    num_key_value_heads=4,
    lora_rank=16,
    lora_alpha=32,
)
