"""The engine's greedy tokens equal transformers + peft on the same files, token for token."""

from __future__ import annotations

import pytest

from macaron.engine import GenerateRequest

from .helpers import PROMPTS, HFReference, greedy, make_engine, run_all

ADAPTERS = [None, "chat", "agent", "code", "ui"]


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_greedy_matches_transformers_peft(engine, tiny_ref, adapter):
    requests = [
        GenerateRequest(rid=f"{adapter}-{i}", prompt=p, sampling=greedy(16), lora_path=adapter)
        for i, p in enumerate(PROMPTS)
    ]
    outs = run_all(engine, requests)
    for i, prompt in enumerate(PROMPTS):
        assert outs[f"{adapter}-{i}"].output_ids == tiny_ref.greedy(adapter, prompt), (adapter, prompt)


def test_adapters_change_the_output(engine):
    requests = [
        GenerateRequest(rid=str(a), prompt=PROMPTS[0], sampling=greedy(16), lora_path=a)
        for a in ADAPTERS
    ]
    outs = run_all(engine, requests)
    assert len({tuple(o.output_ids) for o in outs.values()}) == len(ADAPTERS)


def test_qwen2_with_biases_tied_embeddings_sharded_and_odd_adapters(qwen_assets):
    adapters = {"qv": qwen_assets["qv"], "mlp@v2": qwen_assets["mlp"]}
    eng = make_engine(qwen_assets["model"], adapters)
    ref = HFReference(qwen_assets["model"], {"qv": qwen_assets["qv"], "mlp@v2": qwen_assets["mlp"]})
    requests = [
        GenerateRequest(rid=f"{a}-{i}", prompt=p, sampling=greedy(12), lora_path=a)
        for a in (None, "qv", "mlp@v2")
        for i, p in enumerate(PROMPTS[:2])
    ]
    outs = run_all(eng, requests)
    for a in (None, "qv", "mlp@v2"):
        for i, p in enumerate(PROMPTS[:2]):
            assert outs[f"{a}-{i}"].output_ids == ref.greedy(a, p, 12), (a, p)


@pytest.mark.parametrize("adapter", [None, "code"])
def test_logits_match_transformers_within_tolerance(tiny_assets, tiny_ref, adapter):
    """Not only the argmax: every sampled row's logits equal transformers + peft's within float32
    rounding (prefill in chunks, then decode), relative to the logits' spread."""
    import torch

    eng = make_engine(tiny_assets.model_dir, dict(tiny_assets.adapters), chunked_prefill_size=5)
    seen: list[torch.Tensor] = []
    sample = eng.sampler.__call__

    class Capture:
        def __call__(self, logits, seqs):
            seen.append(logits[0].clone())
            return sample(logits, seqs)

    eng.sampler = Capture()
    prompt = PROMPTS[1]
    out = run_all(eng, [GenerateRequest(rid="l", prompt=prompt, sampling=greedy(8, ignore_eos=True), lora_path=adapter)])["l"]
    prompt_ids = eng.tokenizer.encode(prompt, add_special_tokens=False)
    ids = torch.tensor([prompt_ids + out.output_ids[:-1]])
    with torch.no_grad():
        ref = tiny_ref.model(adapter)(input_ids=ids).logits[0, len(prompt_ids) - 1 :]
    ours = torch.stack(seen)
    assert ours.shape == ref.shape
    scale = ref.abs().max()
    assert (ours - ref).abs().max() <= 1e-4 * scale, float((ours - ref).abs().max() / scale)
