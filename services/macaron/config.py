"""One typed configuration object for every Macaron Serve service.

Sources, later ones winning: field defaults < a YAML file (`--config FILE` or
`$MACARON_CONFIG`) < environment variables `MACARON_<SECTION>__<FIELD>` (for example
`MACARON_ENGINE__PORT=31000`) < command-line flags of the service being started.
Every knob is documented by its field's description; `docs/configuration.md` is generated
from this object (`scripts/generate`) and a test fails when it is stale.
"""

from __future__ import annotations

import contextvars
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from macaron.assets.settings import AssetSettings
from macaron.auth.settings import AuthSettings
from macaron.engine.args import EngineArgs
from macaron.rayserve.settings import RaySettings
from macaron.router.classifier.settings import ClassifierSettings
from macaron.router.settings import RouterSettings
from macaron.gateway.settings import GatewaySettings
from macaron.serve import ServeSettings
from macaron.specialist.settings import SpecialistsSettings
from macaron.telemetry.settings import TelemetrySettings


class MacaronSettings(BaseSettings):
    """The whole configuration: one section per component."""

    model_config = SettingsConfigDict(env_prefix="MACARON_", env_nested_delimiter="__", extra="forbid")

    assets: AssetSettings = Field(default_factory=AssetSettings, description="Built assets and their cache.")
    engine: EngineArgs = Field(default_factory=EngineArgs, description="The embedded base-weight engine.")
    classifier: ClassifierSettings = Field(
        default_factory=ClassifierSettings, description="The L0 router's specialist classifier."
    )
    redis_url: str | None = Field(
        None, description="Redis for state that must not be evicted: sessions, rate limits, adapter versions (run it with `maxmemory-policy noeviction`); empty: an in-process store."
    )
    cache_redis_url: str | None = Field(
        None,
        description="Redis for placement state only (the KV-cache index, prefix affinity, replica load): churn there "
        "never evicts a session or resets a rate limit. Run it with `maxmemory-policy allkeys-lru`, and the redis_url "
        "server with `noeviction`. Empty: placement state lives on the redis_url server under its own key prefix "
        "(with its own breaker, so a full or dead server degrades placement alone).",
    )
    store_timeout_s: float = Field(0.25, description="Deadline of every call to the shared store (Redis).")
    auth: AuthSettings = Field(default_factory=AuthSettings, description="API keys and per-key limits.")
    specialists: SpecialistsSettings = Field(
        default_factory=SpecialistsSettings, description="The four specialist pools (chat, agent, code, ui)."
    )
    router: RouterSettings = Field(
        default_factory=RouterSettings, description="The L0 router: specialist decision, replica placement, forwarding."
    )
    gateway: GatewaySettings = Field(default_factory=GatewaySettings, description="The OpenAI-compatible REST gateway.")
    serve: ServeSettings = Field(default_factory=ServeSettings, description="`macaron serve`: the whole stack in one process.")
    ray: RaySettings = Field(
        default_factory=RaySettings, description="`macaron ray`: the stack as Ray Serve deployments, with replicas and autoscaling."
    )
    telemetry: TelemetrySettings = Field(
        default_factory=TelemetrySettings, description="OpenTelemetry traces across every hop: exporter none, console or otlp."
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
        # Flags (init kwargs) beat the environment, which beats the YAML file.
        return (init_settings, env_settings, _YamlSource(settings_cls))


_yaml_data: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("macaron_yaml_data", default={})


class _YamlSource(PydanticBaseSettingsSource):
    """The YAML file's mapping that load_settings read, as the lowest-priority source."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return _yaml_data.get().get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(_yaml_data.get())


class ConfigError(ValueError):
    """A configuration file or value that cannot be used; the message says which and why."""


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
    token = _yaml_data.set(data)
    try:
        return MacaronSettings(**(overrides or {}))
    finally:
        _yaml_data.reset(token)


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
