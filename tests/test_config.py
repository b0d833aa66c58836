"""The configuration object: defaults, YAML, environment overrides, clear errors, CLI flags."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from macaron.cli_args import add_model_args, explicit_values
from macaron.config import ConfigError, MacaronSettings, load_settings
from macaron.engine.args import EngineArgs
from macaron.ports import ENGINE_PORT, GATEWAY_PORT, ROUTER_PORT, SPECIALIST_PORTS, metrics_port


def test_default_ports_are_the_documented_ones() -> None:
    assert (ENGINE_PORT, GATEWAY_PORT, ROUTER_PORT) == (30000, 8080, 50051)
    assert SPECIALIST_PORTS == {"chat": 50061, "agent": 50062, "code": 50063, "ui": 50064}
    assert metrics_port(ROUTER_PORT) == 51051
    assert load_settings().engine.port == 30000


def test_yaml_then_env_then_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "macaron.yaml"
    cfg.write_text("engine:\n  port: 31000\n  max_running_requests: 4\n")
    assert load_settings(cfg).engine.port == 31000
    monkeypatch.setenv("MACARON_ENGINE__PORT", "32000")
    settings = load_settings(cfg)
    assert settings.engine.port == 32000
    assert settings.engine.max_running_requests == 4
    assert load_settings(cfg, overrides={"engine": {"port": 33000}}).engine.port == 33000


def test_bad_config_says_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("engine: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_settings(bad)
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("engine:\n  no_such_knob: 1\n")
    with pytest.raises(ValueError, match="no_such_knob"):
        load_settings(unknown)


def test_cli_flags_are_generated_from_the_model() -> None:
    parser = argparse.ArgumentParser()
    add_model_args(parser, EngineArgs)
    ns = parser.parse_args(["--port", "31234", "--lora-paths", "chat=/a", "code@v3=/b", "--incremental-streaming-output"])
    values = explicit_values(ns, EngineArgs)
    assert values == {"port": 31234, "lora_paths": ["chat=/a", "code@v3=/b"], "incremental_streaming_output": True}
    assert explicit_values(parser.parse_args([]), EngineArgs) == {}


def test_every_knob_is_documented() -> None:
    def walk(model: type) -> None:
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"
            annotation = field.annotation
            if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
                walk(annotation)

    walk(MacaronSettings)
