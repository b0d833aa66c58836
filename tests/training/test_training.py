"""`macaron adapters train | eval | distill` on the tiny model: real PEFT training, real engine.

The tiny model's weights are random, so these tests check mechanics (loss falls, files are a
standard PEFT adapter the engine and PEFT load, runs are reproducible, bad data is refused
clearly), not answer quality; the shipped SmolLM2 adapters' quality is measured by
`macaron adapters eval` (see the README's figures).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from macaron.training.examples import TrainingDataError, TrainingExample, read_examples, write_examples
from macaron.training.lora_train import TrainConfig, train_adapter
from macaron.training.tasks import task
from macaron.training.tool_catalog import CATALOG, tools_for


@pytest.fixture(scope="module")
def data_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "code.jsonl"
    code = task("code")
    examples = [
        TrainingExample(
            messages=code.student(f"Write a function number {i}.", None).messages,
            target=f"```python\ndef f{i}(x):\n    return x + {i}\n```",
        )
        for i in range(6)
    ]
    write_examples(path, examples)
    return path


def test_training_lowers_the_loss_and_writes_a_peft_adapter(tiny_model, data_file, tmp_path):
    config = TrainConfig(steps=24, batch_size=3, warmup_steps=2, learning_rate=3e-3, num_threads=1)
    result = train_adapter(tiny_model.model_dir, data_file, tmp_path / "code", config, name="code@v2", progress=False)
    assert result.final_loss < result.first_loss * 0.9
    assert result.examples == 6 and result.target_tokens > 0
    card = json.loads((tmp_path / "code" / "macaron-adapter.json").read_text())
    assert card["data_sha256"] == result.data_sha256 and card["name"] == "code@v2"
    assert "/" not in card["base"]  # a name, never a machine path
    from macaron.engine import EngineArgs, GenerateRequest, LLMEngine, SamplingParams

    engine = LLMEngine(EngineArgs(model_path=str(tiny_model.model_dir), lora_paths=[f"code@v2={tmp_path / 'code'}"],
                                  max_total_tokens=2048, num_threads=1))
    outs = {}
    for rid, adapter in (("base", None), ("trained", "code@v2")):
        engine.add_request(GenerateRequest(rid=rid, prompt="def f(", sampling=SamplingParams(temperature=0, max_new_tokens=8), lora_path=adapter))
    while engine.has_unfinished():
        outs.update({o.rid: o.output_ids for o in engine.step() if o.finished})
    assert outs["base"] != outs["trained"]


def test_training_is_reproducible(tiny_model, data_file, tmp_path):
    config = TrainConfig(steps=3, batch_size=2, warmup_steps=1, num_threads=1)
    for run in ("a", "b"):
        train_adapter(tiny_model.model_dir, data_file, tmp_path / run, config, progress=False)
    assert (tmp_path / "a" / "adapter_model.safetensors").read_bytes() == (tmp_path / "b" / "adapter_model.safetensors").read_bytes()


@pytest.mark.parametrize(
    "line, problem",
    [
        ("not json", "not valid JSON"),
        ('{"messages": [], "target": "x"}', "messages"),
        ('{"messages": [{"role": "user", "content": "hi"}], "target": ""}', "target"),
        ('{"messages": [{"role": "user", "content": "hi"}], "target": "x", "tools": 3}', "tools"),
    ],
)
def test_bad_training_data_is_refused_with_its_line(tmp_path, line, problem):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(TrainingDataError, match=problem) as info:
        read_examples(path)
    assert "bad.jsonl:1" in str(info.value)


def test_cli_train_reports_bad_data_and_exits_2(tiny_model, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "macaron.cli", "adapters", "train", "code", "--model", str(tiny_model.model_dir),
         "--data", str(bad), "--out", str(tmp_path / "out"), "--quiet"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2 and "bad.jsonl:1" in proc.stderr and "Traceback" not in proc.stderr


def test_cli_train_prints_one_json_line(tiny_model, data_file, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "macaron.cli", "adapters", "train", "code", "--model", str(tiny_model.model_dir),
         "--data", str(data_file), "--out", str(tmp_path / "out"), "--steps", "2", "--batch-size", "2",
         "--threads", "1", "--quiet"],
        capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["steps"] == 2 and Path(result["out_dir"], "adapter_config.json").is_file()


def test_checks_count_what_each_specialist_must_do():
    tools = tools_for("what's the weather in Oslo tomorrow", seed=0)
    assert "get_weather" in {t["function"]["name"] for t in tools} and len(tools) == 4
    agent, code, ui, chat = task("agent"), task("code"), task("ui"), task("chat")
    assert agent.good('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>', tools)
    assert not agent.good('<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call>', tools)  # city required
    assert not agent.good("It will rain.", tools)
    assert code.good("Here:\n```python\nprint(1)\n```", None) and not code.good("print(1)", None)
    from macaron.training.a2ui_teacher import fill

    form = fill("form", {"page_title": "Book", "first_field": "Name", "second_field": "Guests", "button": "Book",
                         "action": "book_table"})
    assert ui.good(json.dumps(form), None)  # valid A2UI v0.9
    assert not ui.good('{"root": {"type": "button", "props": {"text": "Go"}}}', None)  # the v1 description is not
    form[1]["updateComponents"]["components"][0]["children"].append("missing")
    assert not ui.good(json.dumps(form), None)
    assert ui.good(json.dumps(form), None, served=True)  # as served, the dangling id is pruned first
    plan, budget = ui.served(ui.student("a form", None))
    from macaron.a2ui import a2ui_schema, max_output_bytes

    assert json.loads(plan.json_schema) == a2ui_schema() and budget == max_output_bytes()
    assert chat.good("Paris is the capital of France.", None) and not chat.good("```py\nx\n```", None)


def test_agent_without_tools_is_asked_and_judged_as_prose():
    """A share of agent's prompts comes with no tools: the teacher is shown two worked answers and told it cannot
    act; a target must admit the limit or ask (an invented result is dropped); eval counts a finished prose answer."""
    plain, half, none = task("agent"), task("agent", without_tools_share=0.5), task("agent", without_tools_share=1.0)
    prompts = [f"set an alarm for {h}:00" for h in range(40)]
    assert all(plain.tools(p, seed=i) for i, p in enumerate(prompts))
    assert not any(none.tools(p, seed=i) for i, p in enumerate(prompts))
    drawn = [half.tools(p, seed=i) is None for i, p in enumerate(prompts)]
    assert 8 <= sum(drawn) <= 32 and drawn == [half.tools(p, seed=i) is None for i, p in enumerate(prompts)]
    assert task("code", without_tools_share=1.0).without_tools_share == 0.0  # only agent is asked without tools
    with pytest.raises(ValueError):
        task("agent", without_tools_share=1.5)

    plan = none.teacher("what's my savings balance", None)
    assert plan.tools is None and plan.json_schema is None and plan.messages[-1]["content"] == "what's my savings balance"
    assert [m["role"] for m in plan.messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    honest = "I can't see your accounts from here. Your bank's app shows your savings balance."
    assert none.target(plan, honest, "stop") == honest
    assert none.target(plan, "Your savings balance is $1,204.", "stop") is None  # an invented result
    assert none.target(plan, honest, "length") is None
    assert none.good(honest, None) and not none.good('<tool_call>\n{"name": "x"}\n</tool_call>', None)
    assert none.student("what's my savings balance", None).tools is None


def test_catalog_tools_are_valid_openai_tools():
    for entry in CATALOG:
        fn = entry["function"]
        assert fn["name"].isidentifier() and fn["parameters"]["type"] == "object"
        assert set(fn["parameters"]["required"]) <= set(fn["parameters"]["properties"])


def test_distill_and_eval_run_end_to_end_on_the_tiny_model(tiny_model, tmp_path):
    from macaron.training.distill import distill
    from macaron.training.evaluate import ARMS, evaluate, summary

    provenance = distill(str(tiny_model.model_dir), [task("agent"), task("ui")], tmp_path, per_specialist=2, progress=False)
    for name in ("agent", "ui"):
        assert provenance["specialists"][name]["prompts"] == 2
        # constrained teacher answers are always usable targets when they finish
        for example in read_examples(tmp_path / f"{name}.jsonl") if provenance["specialists"][name]["kept"] else []:
            assert task(name).good(example.target, example.tools)
    code_dir = str(tiny_model.adapters["code"])  # the same weights as a second version: one more arm, same run
    scores = evaluate(str(tiny_model.model_dir), {"code": code_dir, "code@v2": code_dir}, [task("code")], per_specialist=2,
                      progress=False)
    assert set(scores["code"]) == {*ARMS, "adapter@v2"} and scores["code"]["adapter"].total == 2
    assert scores["code"]["adapter@v2"].share == scores["code"]["adapter"].share  # greedy, same weights
    assert set(summary(scores)) >= {"code_adapter", "code_base_bare", "code_adapter_gain", "code_adapter@v2_gain"}
