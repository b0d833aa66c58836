"""transformers and PEFT load the build; adapters change greedy output; greedy steps are decisive."""

from __future__ import annotations

import itertools

import pytest

from macaron.assets import ADAPTER_NAMES, ModelAssets
from macaron.assets.probe import PROBE_PROMPTS, chat_prompt_ids, greedy_probe

# Smallest top-1/top-2 logit gap accepted over the probe (measured on this recipe: 0.161,
# with float noise under 1e-3); far above fp32 noise so greedy comparisons cannot flip.
GAP_FLOOR = 0.05


@pytest.fixture(scope="module")
def base_and_tokenizer(tiny_assets: ModelAssets):  # type: ignore[no-untyped-def]
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(tiny_assets.model_dir)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_assets.model_dir))
    assert all(p.dtype == torch.float32 for p in model.parameters())
    return model, tokenizer


def test_loads_as_gqa_llama(base_and_tokenizer) -> None:  # type: ignore[no-untyped-def]
    model, tokenizer = base_and_tokenizer
    config = model.config
    assert config.model_type == "llama"
    assert config.num_key_value_heads < config.num_attention_heads
    assert config.tie_word_embeddings is False
    assert config.max_position_embeddings == 2048
    assert config.vocab_size == len(tokenizer)
    assert model.generation_config.do_sample is False


def test_adapters_have_nonzero_a_and_b(tiny_assets: ModelAssets) -> None:
    from safetensors import safe_open

    for path in tiny_assets.adapters.values():
        with safe_open(str(path / "adapter_model.safetensors"), framework="pt") as weights:
            names = list(weights.keys())
            assert any("lora_A" in n for n in names) and any("lora_B" in n for n in names)
            for name in names:
                assert weights.get_tensor(name).abs().min() > 0, name


@pytest.mark.filterwarnings("ignore::FutureWarning")  # PEFT calls a transformers API deprecated in v5
def test_each_adapter_changes_greedy_generation(
    tiny_assets: ModelAssets, base_and_tokenizer, one_thread: None
) -> None:  # type: ignore[no-untyped-def]
    import copy

    import torch
    from peft import PeftModel

    base, tokenizer = base_and_tokenizer
    prompts = [chat_prompt_ids(tokenizer, p) for p in PROBE_PROMPTS[:2]]

    def generate(model) -> list[list[int]]:  # type: ignore[no-untyped-def]
        with torch.no_grad():
            return [
                model.generate(input_ids=torch.tensor([ids]), max_new_tokens=8, do_sample=False,
                               eos_token_id=None, pad_token_id=tokenizer.pad_token_id)[0, len(ids):].tolist()
                for ids in prompts
            ]

    outputs = {"base": generate(base)}
    for name in ADAPTER_NAMES:
        peft_model = PeftModel.from_pretrained(copy.deepcopy(base), str(tiny_assets.adapters[name])).eval()
        outputs[name] = generate(peft_model)
    for a, b in itertools.combinations(outputs, 2):
        for index in range(len(prompts)):
            assert outputs[a][index] != outputs[b][index], (a, b, index)


def test_greedy_steps_are_decisive_and_varied(tiny_assets: ModelAssets, one_thread: None) -> None:
    result = greedy_probe(tiny_assets.model_dir, tiny_assets.adapters, PROBE_PROMPTS, steps=16)
    assert result.min_gap > GAP_FLOOR, result.min_gap_at
    assert result.min_gap > 50 * result.max_noise
    for variant, outputs in result.outputs.items():
        assert len({tuple(o) for o in outputs}) == len(PROBE_PROMPTS), variant  # no collapse across prompts
        assert len({t for o in outputs for t in o}) > 100, variant  # no single repeated token
    for a, b in itertools.combinations(result.outputs, 2):
        same = sum(x == y for x, y in zip(result.outputs[a], result.outputs[b]))
        assert same == 0, (a, b)
