"""One typed configuration object for every Macaron Serve service.

Sources, later ones winning: field defaults < a YAML file (`--config FILE` or
`$MACARON_CONFIG`) < environment variables `MACARON_<SECTION>__<FIELD>` (for example
`MACARON_ENGINE__PORT=31000`) < command-line flags of the service being started.
Every knob is documented by its field's description; `docs/configuration.md` is generated
from this object (`scripts/generate`) and a test fails when it is stale.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from macaron.assets.settings import AssetSettings
from macaron.engine.args import EngineArgs


class MacaronSettings(BaseSettings):
    """The whole configuration: one section per component."""

    model_config = SettingsConfigDict(env_prefix="MACARON_", env_nested_delimiter="__", extra="forbid")

    assets: AssetSettings = Field(default_factory=AssetSettings, description="Built assets and their cache.")
    engine: EngineArgs = Field(default_factory=EngineArgs, description="The embedded base-weight engine.")
    redis_url: str | None = Field(
        None, description="Redis for sessions, prefix affinity and limits; empty: an in-process store."
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Environment beats YAML (passed as init kwargs by load_settings).
        return (env_settings, init_settings)


class ConfigError(ValueError):
    """A configuration file or value that cannot be used; the message says which and why."""


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_settings(path: str | os.PathLike[str] | None = None, overrides: dict[str, Any] | None = None) -> MacaronSettings:
    """Loads defaults < YAML < environment < `overrides` (command-line flags, nested by section)."""
    path = path or os.environ.get("MACARON_CONFIG")
    data: dict[str, Any] = {}
    if path:
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except FileNotFoundError as exc:
            raise ConfigError(f"config file {path} does not exist; pass an existing YAML file") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"config file {path} must hold a mapping of sections, got {type(data).__name__}")
    settings = MacaronSettings(**data)
    if overrides:
        merged = _deep_merge(settings.model_dump(), overrides)
        settings = MacaronSettings.model_validate(merged)
    return settings


def _describe(model: type[BaseModel], prefix: str, lines: list[str]) -> None:
    nested = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            nested.append((name, field, annotation))
            continue
        if field.default_factory is not None:
            default = "(computed)" if name == "cache_dir" else field.default_factory()
        else:
            default = field.default
        env = "MACARON_" + f"{prefix}{name}".upper().replace(".", "__")
        lines.append(f"| `{prefix}{name}` | `{default!r}` | `{env}` | {field.description or ''} |")
    for name, field, annotation in nested:
        lines.append(f"\n## `{prefix}{name}` — {field.description or ''}\n")
        lines.append("| key | default | env | meaning |\n|---|---|---|---|")
        _describe(annotation, f"{prefix}{name}.", lines)


def render_reference() -> str:
    """The configuration reference in Markdown (generated into docs/configuration.md)."""
    lines = [
        "# Configuration reference",
        "",
        "Generated from `macaron.config.MacaronSettings` by `scripts/generate`; do not edit.",
        "Sources, later ones winning: defaults < YAML (`--config`, `$MACARON_CONFIG`) < environment < flags.",
        "",
        "## top level\n",
        "| key | default | env | meaning |\n|---|---|---|---|",
    ]
    _describe(MacaronSettings, "", lines)
    return "\n".join(lines) + "\n"
