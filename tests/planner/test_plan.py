"""`macaron plan`: parameter counts of public configs (dense, Qwen-MoE, GLM-MoE, MLA) against their
published totals, the engine's own accounting on models it loads, and the CLI's answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from macaron.cli import main
from macaron.planner import AdapterSpec, adapter_from_config, make_plan, model_spec, read_adapter_spec, read_model_spec
from macaron.planner.adapters import pool_bytes


@pytest.mark.parametrize(
    "name, billions",
    [
        ("qwen3-30b-a3b", 30.5),  # Qwen3-30B-A3B: 30.5 B
        ("qwen1.5-moe-a2.7b", 14.3),  # Qwen1.5-MoE-A2.7B: 14.3 B
        ("glm-4.5-air", 106),  # GLM-4.5-Air: 106 B (without its MTP layer)
        ("glm-5", 744),  # GLM-5: 744 B
        ("deepseek-v3", 671),  # DeepSeek-V3: 671 B (without its MTP layer)
    ],
)
def test_parameter_counts_match_the_published_totals(name, billions):
    spec = read_model_spec(name)
    assert abs(spec.num_params / 1e9 - billions) / billions < 0.01, spec.num_params


def test_kv_bytes_per_token_gqa_and_mla():
    qwen = read_model_spec("qwen3-30b-a3b")  # 48 layers x 2 x 4 heads x 128 x 2 B
    assert qwen.kv_bytes_per_token() == 48 * 2 * 4 * 128 * 2
    assert qwen.kv_bytes_per_token(tp=4) == 48 * 2 * 1 * 128 * 2  # one head per rank
    assert qwen.kv_bytes_per_token(tp=8) == qwen.kv_bytes_per_token(tp=4)  # replicated beyond 4 ranks
    ds = read_model_spec("deepseek-v3")  # latent 512 + rope key 64 per layer, on every rank
    assert ds.kv_bytes_per_token(tp=16) == ds.kv_bytes_per_token() == 61 * 576 * 2
    assert ds.kv_bytes_per_token("fp8_e4m3") == 61 * 576


def test_adapter_targets_follow_peft_matching():
    model = read_model_spec("qwen1.5-moe-a2.7b")
    attn = adapter_from_config({"r": 8, "target_modules": ["q_proj", "v_proj"]})
    assert attn.num_params(model) == 24 * 8 * ((2048 + 2048) + (2048 + 2048))
    experts = adapter_from_config({"r": 4, "target_modules": ["down_proj"], "layers_to_transform": [0]})
    # layer 0's 60 experts and its shared expert
    assert experts.num_params(model) == 4 * (60 * (1408 + 2048) + (5632 + 2048))
    regex = adapter_from_config({"r": 2, "target_modules": r".*\.layers\.1\.self_attn\.o_proj"})
    assert regex.num_params(model) == 2 * (2048 + 2048)
    assert adapter_from_config({"r": 8, "target_modules": ["qq_proj"]}).unmatched_targets(model) == ["qq_proj"]
    with pytest.raises(ValueError, match="not LORA"):
        adapter_from_config({"peft_type": "IA3", "r": 1})


def test_plan_figures_add_up():
    model = read_model_spec("glm-4.5-air")
    adapters = [AdapterSpec(name=f"a{i}", rank=64, target_modules=("q_proj", "k_proj", "v_proj", "o_proj")) for i in range(4)]
    plan = make_plan(model, adapters, gpu="h200", gpus=8, context=131072, max_loras_per_batch=6)
    assert plan.base_weight_bytes == model.num_params * 2
    assert plan.adapter_pool_bytes == 6 * plan.adapter_bytes["a0"]  # one full-rank adapter per slot
    assert plan.kv_budget_bytes_per_gpu == plan.static_bytes_per_gpu - plan.weight_bytes_per_gpu - plan.adapter_pool_bytes_per_gpu
    assert plan.kv_tokens == plan.kv_budget_bytes_per_gpu // plan.kv_bytes_per_token
    assert plan.fits
    too_small = make_plan(model, adapters, gpu="h100", gpus=2)
    assert not too_small.fits and "exceed the static pool" in too_small.why


def _engine_and_plan(assets, **engine_kw):
    from macaron.engine import EngineArgs, LLMEngine

    eng = LLMEngine(
        EngineArgs(
            model_path=str(assets.model_dir),
            lora_paths=[f"{k}={v}" for k, v in assets.adapters.items()],
            max_total_tokens=4096,
            num_threads=1,
            **engine_kw,
        )
    )
    model = read_model_spec(assets.model_dir)
    adapters = [read_adapter_spec(f"{k}={v}") for k, v in assets.adapters.items()]
    plan = make_plan(model, adapters, max_loras_per_batch=eng.lora.pool.num_slots, dtype="float32")
    return eng, model, adapters, plan


def _check_against_engine(eng, model, adapters, plan):
    mem = eng.memory_usage()
    assert plan.base_weight_bytes == mem.base_weight_bytes
    assert plan.adapter_bytes == mem.adapter_bytes
    assert plan.adapter_pool_bytes == mem.adapter_pool_bytes_on_accelerator > 0
    assert plan.kv_bytes_per_token * eng.block_manager.num_blocks * eng.block_manager.block_size == mem.kv_cache_bytes
    rank = max(a.max_rank for a in adapters)
    assert pool_bytes(model, adapters, 3, rank, "float32") == eng.lora.device_pool_bytes() * 3 // eng.lora.pool.num_slots


def test_plan_equals_the_engines_accounting_on_the_tiny_model(tiny_assets):
    _check_against_engine(*_engine_and_plan(tiny_assets, max_loras_per_batch=5))


def _engine_accounting_on_meta(cfg: dict, rank: int, modules: tuple[str, ...], slots: int) -> dict[str, int]:
    """The engine's own figures for a config it would load, without building the weights: its
    model class on the meta device, its pool formula, its KV-cache layout."""
    import torch

    from macaron.engine.lora_manager import pool_bytes as engine_pool_bytes
    from macaron.engine.models.llama import CausalLM, ModelShape

    shape = ModelShape.from_config(cfg)
    with torch.device("meta"):
        model = CausalLM(shape, cfg, torch.float32)
    weights = sum(p.nbytes for p in {id(p): p for p in model.parameters()}.values())
    adapter = sum(rank * sum(shape.in_out(m)) * 4 for m in modules) * shape.num_layers
    return {
        "weights": weights,
        "adapter": adapter,
        "pool": engine_pool_bytes(shape, slots, rank, frozenset(modules), 4),
        "kv_per_token": 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * 4,
    }


def _check_on_meta(cfg: dict, lora: dict) -> None:
    model = model_spec(cfg)
    adapter = adapter_from_config(lora, name="a")
    plan = make_plan(model, [adapter], max_loras_per_batch=8, dtype="float32")
    engine = _engine_accounting_on_meta(cfg, adapter.rank, tuple(adapter.target_modules), 8)
    assert plan.base_weight_bytes == engine["weights"]
    assert plan.adapter_bytes["a"] == engine["adapter"]
    assert plan.adapter_pool_bytes == engine["pool"]
    assert plan.kv_bytes_per_token == engine["kv_per_token"]


def test_plan_equals_the_engines_accounting_on_the_bench_model():
    from macaron.assets.adapters import lora_config
    from macaron.assets.model import llama_config
    from macaron.assets.presets import BENCH

    cfg = llama_config(BENCH, eos_token_id=0, pad_token_id=0).to_dict()
    cfg["architectures"] = ["LlamaForCausalLM"]
    lora = lora_config(BENCH).to_dict()
    lora["target_modules"] = sorted(lora["target_modules"])
    _check_on_meta(cfg, lora)


def test_plan_equals_the_engines_accounting_on_smollm2(macaron_cache_dir):
    import macaron.assets

    ensure = getattr(macaron.assets, "ensure_smollm2_model", None)
    if ensure is None:
        pytest.skip("this checkout has no SmolLM2 asset (macaron.assets.ensure_smollm2_model)")
    import inspect

    accepted = inspect.signature(ensure).parameters
    kwargs = {k: v for k, v in {"cache_dir": macaron_cache_dir, "progress": False}.items() if k in accepted}
    assets = ensure(**kwargs)
    cfg = json.loads((Path(assets.model_dir) / "config.json").read_text())
    _check_on_meta(cfg, {"r": 64, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]})


def test_cli_prints_the_plan_and_says_whether_it_fits(capsys, tmp_path: Path):
    adapter = tmp_path / "code"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 16, "target_modules": ["q_proj", "o_proj"]}))
    rc = main(["plan", "--model", "qwen3-30b-a3b", "--adapters", f"code={adapter}", "--gpus", "2", "--context", "32768", "--json"])
    plan = json.loads(capsys.readouterr().out)
    assert rc == 0 and plan["fits"] and plan["adapter_bytes"]["code"] == 48 * 16 * ((2048 + 4096) + (4096 + 2048)) * 2
    rc = main(["plan", "--model", "glm-5", "--lora-rank", "64", "--gpus", "8"])
    out = capsys.readouterr().out
    assert rc == 1 and "fits           NO" in out and "match no module" in out
    assert main(["plan", "--model", str(tmp_path / "missing")]) == 2
    assert "no config.json" in capsys.readouterr().err


@pytest.fixture(scope="module")
def tiny_assets(macaron_cache_dir: Path):
    from macaron.assets import ensure_tiny_model

    return ensure_tiny_model(cache_dir=macaron_cache_dir, progress=False)
