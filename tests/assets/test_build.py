"""The build is reproducible, cached once per recipe, safe under races, and driven by the CLI."""

from __future__ import annotations

import argparse
import json
import threading
from pathlib import Path

import pytest

from macaron.assets import ADAPTER_NAMES, ModelAssets, ensure_tiny_model
from macaron.assets.build import build_assets
from macaron.assets.layout import MANIFEST_NAME, build_dir_name
from macaron.assets.presets import BENCH, TINY


def _tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_two_builds_are_byte_identical(tmp_path: Path) -> None:
    first = build_assets(TINY, tmp_path / "a", progress=False)
    second = build_assets(TINY, tmp_path / "b", progress=False)
    files_a, files_b = _tree_bytes(tmp_path / "a"), _tree_bytes(tmp_path / "b")
    assert files_a.keys() == files_b.keys()
    assert "model/model.safetensors" in files_a
    for name in ADAPTER_NAMES:
        assert f"adapters/{name}/adapter_model.safetensors" in files_a
    assert [k for k in files_a if files_a[k] != files_b[k]] == []
    assert first.adapters.keys() == second.adapters.keys() == set(ADAPTER_NAMES)


def test_build_matches_the_cached_build(tmp_path: Path, tiny_assets: ModelAssets) -> None:
    build_assets(TINY, tmp_path / "fresh", progress=False)
    assert _tree_bytes(tmp_path / "fresh") == _tree_bytes(tiny_assets.model_dir.parent)


def test_layout_and_files(tiny_assets: ModelAssets) -> None:
    model_files = {p.name for p in tiny_assets.model_dir.iterdir()}
    assert {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
    } <= model_files
    assert tuple(tiny_assets.adapters) == ADAPTER_NAMES
    for path in tiny_assets.adapters.values():
        assert {p.name for p in path.iterdir()} == {"adapter_config.json", "adapter_model.safetensors"}
        config = json.loads((path / "adapter_config.json").read_text())
        assert (config["r"], config["lora_alpha"]) == (8, 16)
        assert {"q_proj", "k_proj", "v_proj", "o_proj"} <= set(config["target_modules"])
    manifest = json.loads((tiny_assets.model_dir.parent / MANIFEST_NAME).read_text())
    assert "model/model.safetensors" in manifest["files"]
    text = "\n".join(p.read_text() for p in tiny_assets.model_dir.parent.rglob("*.json"))
    assert str(tiny_assets.model_dir.parent) not in text  # no machine paths in the files


def test_ensure_reuses_the_cache(tiny_assets: ModelAssets, macaron_cache_dir: Path) -> None:
    weights = tiny_assets.model_dir / "model.safetensors"
    before = weights.stat().st_mtime_ns
    assert ensure_tiny_model(macaron_cache_dir, progress=False) == tiny_assets
    assert weights.stat().st_mtime_ns == before
    assert tiny_assets.model_dir.parent.name == build_dir_name(TINY)


def test_incomplete_build_is_rebuilt_and_force_rebuilds(tmp_path: Path) -> None:
    assets = ensure_tiny_model(tmp_path, progress=False)
    manifest = assets.model_dir.parent / MANIFEST_NAME
    expected = _tree_bytes(assets.model_dir.parent)
    manifest.unlink()  # looks like a build that died half-way
    assert ensure_tiny_model(tmp_path, progress=False) == assets
    assert _tree_bytes(assets.model_dir.parent) == expected
    inode = manifest.stat().st_ino
    ensure_tiny_model(tmp_path, progress=False, force=True)
    assert manifest.stat().st_ino != inode
    assert _tree_bytes(assets.model_dir.parent) == expected


def test_racing_builders_publish_one_complete_build(tmp_path: Path) -> None:
    results: list[ModelAssets] = []
    errors: list[BaseException] = []

    def build() -> None:
        try:
            results.append(ensure_tiny_model(tmp_path, progress=False))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len({r.model_dir for r in results}) == 1
    models = tmp_path / "models"
    assert sorted(p.name for p in models.iterdir() if p.is_dir()) == [build_dir_name(TINY)]
    assert (models / build_dir_name(TINY) / MANIFEST_NAME).is_file()


def test_cli_build_prints_paths(
    tiny_assets: ModelAssets, macaron_cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from macaron.assets import cli

    parser = argparse.ArgumentParser(prog="macaron")
    parser.add_argument("--config")
    cli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["assets", "build", "--model", "tiny", "--cache-dir", str(macaron_cache_dir), "--quiet"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert str(tiny_assets.model_dir) in out
    for name, path in tiny_assets.adapters.items():
        assert f"{name}={path}" in out


def test_bench_preset_shape() -> None:
    """The benchmark model is not built here; its shape is checked on the meta device."""
    import torch
    from transformers import LlamaForCausalLM

    from macaron.assets.model import llama_config

    config = llama_config(BENCH, eos_token_id=0, pad_token_id=0)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    parameters = sum(p.numel() for p in model.parameters())
    assert 100e6 <= parameters <= 130e6
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (768, 12, 12)
    assert config.num_key_value_heads < config.num_attention_heads
    assert BENCH.lora_rank == 16
