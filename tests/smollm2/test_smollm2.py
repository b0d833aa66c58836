"""The real default model: SmolLM2-135M-Instruct converted from its wheel, and its shipped adapters.

Few and quick on purpose (the model is 135 M parameters on 2 cores): the conversion, the
engine's greedy tokens against transformers + PEFT on the same directory for the base and every
shipped adapter, and that the code specialist answers a coding question with code.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from macaron.assets import ADAPTER_NAMES, ModelAssets
from macaron.engine import EngineArgs, GenerateRequest, LLMEngine, SamplingParams

PROMPTS = ["What is the capital of France?", "Write a Python function that reverses a list."]


@pytest.fixture(scope="module")
def smollm2(macaron_cache_dir: Path) -> ModelAssets:
    from macaron.assets.smollm2 import ensure_smollm2_model

    return ensure_smollm2_model(macaron_cache_dir, progress=False)


@pytest.fixture(scope="module")
def engine(smollm2: ModelAssets) -> LLMEngine:
    return LLMEngine(
        EngineArgs(
            model_path=str(smollm2.model_dir),
            lora_paths=[f"{n}={p}" for n, p in smollm2.adapters.items()],
            max_total_tokens=8192,
            num_threads=1,
        )
    )


def _chat(tokenizer, prompt: str, system: str | None = None) -> str:
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def _run(engine: LLMEngine, requests: list[GenerateRequest]) -> dict[str, list[int]]:
    for request in requests:
        engine.add_request(request)
    done: dict[str, list[int]] = {}
    while engine.has_unfinished():
        for out in engine.step():
            if out.finished:
                done[out.rid] = out.output_ids
    return done


def test_conversion_is_a_plain_llama_directory(smollm2: ModelAssets):
    config = json.loads((smollm2.model_dir / "config.json").read_text())
    assert "quantization_config" not in config
    assert (config["model_type"], config["num_hidden_layers"], config["hidden_size"]) == ("llama", 30, 576)
    assert (config["vocab_size"], config["tie_word_embeddings"]) == (49152, True)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2.model_dir)
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}],
        tools=[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert "SmolLM" in text and "<tools>" in text and text.endswith("<|im_start|>assistant\n")


def test_all_four_specialist_adapters_ship(smollm2: ModelAssets):
    # ui@v2 (A2UI) next to ui (v1); agent@v2 (answers without tools too) next to agent
    assert sorted(smollm2.adapters) == sorted([*ADAPTER_NAMES, "ui@v2", "agent@v2"])
    for path in smollm2.adapters.values():
        card = json.loads((path / "macaron-adapter.json").read_text())
        assert card["final_loss"] < card["first_loss"]


@pytest.mark.parametrize("adapter", [None, *ADAPTER_NAMES, "ui@v2", "agent@v2"])
def test_engine_greedy_equals_transformers(engine: LLMEngine, smollm2: ModelAssets, adapter: str | None):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    if adapter is not None and adapter not in smollm2.adapters:
        pytest.skip(f"adapter {adapter} not shipped")
    prompts = [_chat(engine.tokenizer, p) for p in PROMPTS]
    outs = _run(engine, [
        GenerateRequest(rid=str(i), prompt=p, sampling=SamplingParams(temperature=0, max_new_tokens=12), lora_path=adapter)
        for i, p in enumerate(prompts)
    ])
    model = AutoModelForCausalLM.from_pretrained(smollm2.model_dir, dtype=torch.float32).eval()
    if adapter is not None:
        model = PeftModel.from_pretrained(model, str(smollm2.adapters[adapter])).eval()
    for i, prompt in enumerate(prompts):
        ids = engine.tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            ref = model.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=sorted(engine.eos_token_ids))
        expected = ref[0, ids.shape[1]:].tolist()
        assert outs[str(i)] == expected, (adapter, PROMPTS[i])


def test_code_specialist_answers_a_coding_question_with_code(engine: LLMEngine, smollm2: ModelAssets):
    from macaron.training.tasks import task

    if "code" not in smollm2.adapters:
        pytest.skip("code adapter not shipped")
    code = task("code")
    prompt = _chat(engine.tokenizer, "Write a function that checks whether a number is prime.", code.serving_prompt)
    outs = {}
    engine.add_request(GenerateRequest(rid="c", prompt=prompt, sampling=SamplingParams(temperature=0, max_new_tokens=200), lora_path="code"))
    while engine.has_unfinished():
        for out in engine.step():
            if out.finished:
                outs[out.rid] = out.text
    assert code.good(outs["c"], None), outs["c"]


def test_ui_v2_answers_sdk_valid_a2ui(engine: LLMEngine, smollm2: ModelAssets):
    """ui@v2 as the specialist serves it (profile prompt, the bounded A2UI grammar, strays pruned): the official
    SDK accepts it."""
    from macaron.a2ui import a2ui_schema, max_output_bytes, validate_a2ui
    from macaron.training.tasks import task

    ui = task("ui")
    prompts = ["Design a login form for a bakery shop.", "Make a settings page with notification options."]
    for i, text in enumerate(prompts):
        engine.add_request(GenerateRequest(
            rid=str(i), prompt=_chat(engine.tokenizer, text, ui.serving_prompt), lora_path="ui@v2",
            sampling=SamplingParams(temperature=0, max_new_tokens=max_output_bytes(), json_schema=json.dumps(a2ui_schema())),
        ))
    outs = {}
    while engine.has_unfinished():
        for out in engine.step():
            if out.finished:
                outs[out.rid] = out
    for out in outs.values():
        assert out.finish_reason["type"] == "stop", out.finish_reason
        messages = validate_a2ui(out.text, prune=True)
        assert messages[1]["updateComponents"]["components"][0]["id"] == "root"


def test_agent_v2_answers_in_prose_without_tools_and_calls_one_with_them(engine: LLMEngine, smollm2: ModelAssets):
    """A request the router sends to agent comes with or without tools. agent (v1) only ever saw tools and
    answered a tool-less request with noise; agent@v2, the version served by default, answers it in prose
    and still calls an offered tool."""
    from macaron.training.tasks import task
    from macaron.training.tool_catalog import tools_for

    if "agent@v2" not in smollm2.adapters:
        pytest.skip("agent@v2 not shipped")
    agent = task("agent")
    request = "Set an alarm for 6:30 tomorrow morning"
    tools = tools_for(request, seed=0)
    prompts = {
        "none": _chat(engine.tokenizer, request, agent.serving_prompt),
        "tools": engine.tokenizer.apply_chat_template(
            agent.student(request, tools).messages, tools=tools, tokenize=False, add_generation_prompt=True),
    }
    for rid, prompt in prompts.items():
        engine.add_request(GenerateRequest(rid=rid, prompt=prompt, lora_path="agent@v2",
                                           sampling=SamplingParams(temperature=0, max_new_tokens=160)))
    outs = {}
    while engine.has_unfinished():
        for out in engine.step():
            if out.finished:
                outs[out.rid] = out.text
    assert agent.good(outs["none"], None), outs["none"]  # a finished prose answer, no call, no JSON
    assert agent.good(outs["tools"], tools), outs["tools"]  # a well-formed call of an offered tool
