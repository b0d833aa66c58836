"""Settings of the specialist pools: the four profiles, engine discovery, limits, draining.

`MacaronSettings.specialists` holds one `SpecialistsSettings`; each profile is its own class
(`ChatProfile`, ...) only so that the generated configuration reference shows each profile's
own defaults. Every field is documented by its description (docs/configuration.md).
Importing this module stays light (pydantic only): the configuration imports it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from macaron.a2ui.settings import A2uiSettings
from macaron.auth.settings import ServerTlsSettings
from macaron.discovery import DiscoverySettings
from macaron.ports import SPECIALIST_PORTS


class ProfileSettings(BaseModel):
    """One specialist: its adapter, prompt, sampling defaults and caps, limits and post-processing."""

    model_config = ConfigDict(extra="forbid")

    adapter: str = Field("chat", description="Adapter name on the base-weight group (SGLang lora_path).")
    adapter_version: str | None = Field(
        None, description="Adapter version (sent as NAME@VERSION); empty: the unversioned adapter."
    )
    port: int = Field(SPECIALIST_PORTS["chat"], description="gRPC port of this specialist's server.")
    metrics_port: int | None = Field(
        None, description="Prometheus /metrics port; empty: the gRPC port + 1000; 0: no metrics server."
    )
    system_prompt: str = Field("", description="System prompt put first in every conversation.")
    max_new_tokens: int = Field(
        512, description="Default output budget; lowered to fit the context when the request sets none."
    )
    temperature: float = Field(0.7, description="Default sampling temperature (0 is greedy).")
    top_p: float = Field(0.95, description="Default nucleus sampling mass.")
    top_k: int = Field(-1, description="Default top-k (-1 is off).")
    repetition_penalty: float = Field(
        1.0,
        description="Default repetition penalty (SGLang's; 1 is off). Small chat models fall into loops without "
        "one; code, tool calls and UI JSON repeat tokens on purpose, so only chat sets it by default.",
    )
    max_new_tokens_cap: int = Field(4096, description="Largest max_new_tokens a request may ask for.")
    max_temperature: float = Field(2.0, description="Largest temperature a request may ask for.")
    context_length: int | None = Field(
        None, description="Longest prompt plus output in tokens; empty: the engine's context length."
    )
    tool_call_parser: str | None = Field(
        "hermes", description="Tool-call parser name (see tool_parsers.py); empty: requests with tools are refused."
    )
    output_schema: Literal["none", "ui", "a2ui"] = Field(
        "none",
        description="Default output constraint when a request sets no response_format: a2ui constrains to the "
        "bounded A2UI v0.9 grammar (specialists.a2ui) and validates with the A2UI SDK before returning; ui does "
        "the same with the project's UI description v1 (also available to any request as response_format "
        "json_schema named macaron_ui_v1).",
    )


CHAT_PROMPT = "You are Macaron, a helpful, concise assistant."
AGENT_PROMPT = (
    "You are Macaron's agent. Plan the user's task and call the offered tools when they help; "
    "answer from tool results."
)
CODE_PROMPT = "You are Macaron's coding assistant. Write correct, idiomatic code and explain it briefly."
UI_PROMPT = (
    "You are Macaron's interface designer. Answer with A2UI v0.9 messages as one JSON array: createSurface, "
    'then updateComponents whose first component is {"id": "root", "component": "Column", "children": [...]}.'
)


def _profile_class(name: str, **defaults: Any) -> type[ProfileSettings]:
    """A ProfileSettings subclass whose field defaults are this profile's (descriptions kept)."""
    defaults = {"adapter": name, "port": SPECIALIST_PORTS[name], **defaults}
    fields: dict[str, Any] = {}
    for key, value in defaults.items():
        base = ProfileSettings.model_fields[key]
        fields[key] = (base.annotation, Field(value, description=base.description))
    return create_model(f"{name.capitalize()}Profile", __base__=ProfileSettings, **fields)


ChatProfile = _profile_class("chat", system_prompt=CHAT_PROMPT, repetition_penalty=1.15)
AgentProfile = _profile_class("agent", system_prompt=AGENT_PROMPT, temperature=0.3)
CodeProfile = _profile_class("code", system_prompt=CODE_PROMPT, temperature=0.2, max_new_tokens=1024)
UiProfile = _profile_class("ui", system_prompt=UI_PROMPT, temperature=0.5, max_new_tokens=4096, output_schema="a2ui")


class SpecialistsSettings(BaseModel):
    """The specialist pools: four profiles over one shared base-weight group."""

    model_config = ConfigDict(extra="forbid")

    chat: ChatProfile = Field(default_factory=ChatProfile, description="L0 chat: conversation, fallback, judge.")  # type: ignore[valid-type]
    agent: AgentProfile = Field(default_factory=AgentProfile, description="L1 agent: tools and tool calls.")  # type: ignore[valid-type]
    code: CodeProfile = Field(default_factory=CodeProfile, description="L2 code: programs and repositories.")  # type: ignore[valid-type]
    ui: UiProfile = Field(default_factory=UiProfile, description="L3 ui: interfaces as A2UI v0.9 messages, SDK-validated.")  # type: ignore[valid-type]
    a2ui: A2uiSettings = Field(
        default_factory=A2uiSettings,
        description="The bounded A2UI grammar of output_schema a2ui: kept components and size bounds, which fix "
        "its byte budget (2,715 bytes with the defaults; a profile's max_new_tokens at least that large always "
        "completes an answer).",
    )
    discovery: DiscoverySettings = Field(
        default_factory=DiscoverySettings, description="How specialists find the base-weight group's replicas."
    )
    host: str = Field(
        "127.0.0.1",
        description="Address the specialists' gRPC servers bind to; any non-loopback address requires auth.internal_token.",
    )
    tls: ServerTlsSettings = Field(
        default_factory=ServerTlsSettings, description="TLS of the specialists' gRPC servers (off while cert_file is empty)."
    )
    tokenizer_path: str | None = Field(
        None,
        description="Tokenizer directory used to render prompts and count tokens; "
        "empty: engine.model_path, else the tiny model's.",
    )
    grace_period_s: float = Field(10.0, description="On SIGTERM, seconds in-flight streams get to finish.")
    max_concurrent_streams: int = Field(
        64, description="Most streams one specialist serves at once; beyond this RESOURCE_EXHAUSTED."
    )
    retry_after_ms: int = Field(1000, description="Retry delay suggested with RESOURCE_EXHAUSTED (google.rpc.RetryInfo).")
    default_timeout_s: float = Field(600.0, description="Engine call timeout when the gRPC call has no deadline.")
    max_messages: int = Field(1024, description="Most messages in one request.")
    max_tools: int = Field(128, description="Most tools in one request.")

    def profile(self, name: str) -> ProfileSettings:
        """The profile called `name`; KeyError lists the known ones."""
        if name not in SPECIALIST_PORTS:
            raise KeyError(f"unknown specialist {name!r}; choose one of {', '.join(SPECIALIST_PORTS)}")
        return getattr(self, name)
