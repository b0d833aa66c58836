"""A profile at run time: its settings, its tool-call parser, and what its output is constrained to.

`Profile` satisfies `macaron.prompting.PromptProfile`, so the router renders exactly the text a
specialist does by loading the same profile (`load_profile(settings.specialists, name)`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from macaron.a2ui.settings import A2uiSettings
from macaron.prompting import ChatRequest
from macaron.specialist.errors import BadRequestError
from macaron.specialist.settings import ProfileSettings, SpecialistsSettings
from macaron.specialist.tool_parsers import ToolCallParser, get_parser
from macaron.specialist.ui_schema import ui_schema

OutputMode = Literal["text", "tools", "forced_tool", "json", "ui", "a2ui"]
"""text: streamed as is; tools: streamed, tool calls parsed at the end; forced_tool: one
constrained call; json: constrained JSON, validated at the end; ui: constrained UI description
v1, validated before anything is sent; a2ui: constrained A2UI messages, validated with the A2UI
SDK before anything is sent."""

JSON_OBJECT_SCHEMA: dict[str, Any] = {"type": "object"}


@dataclass(frozen=True)
class Profile:
    """One specialist's behaviour."""

    name: str
    settings: ProfileSettings
    parser: ToolCallParser | None
    a2ui: A2uiSettings = field(default_factory=A2uiSettings)

    @property
    def system_prompt(self) -> str:
        return self.settings.system_prompt

    @property
    def tool_call_prefix(self) -> str:
        return self.parser.call_prefix if self.parser else ""

    @property
    def lora_path(self) -> str:
        """The engine's lora_path: NAME or NAME@VERSION."""
        s = self.settings
        return f"{s.adapter}@{s.adapter_version}" if s.adapter_version else s.adapter


@dataclass(frozen=True)
class OutputPlan:
    """How one request's output is constrained and post-processed."""

    mode: OutputMode
    schema: dict[str, Any] | None = None

    @property
    def json_schema(self) -> str | None:
        """The engine's json_schema parameter."""
        return None if self.schema is None else json.dumps(self.schema)


def load_profile(settings: SpecialistsSettings, name: str) -> Profile:
    """The run-time profile `name` (KeyError for unknown names or parsers)."""
    profile = settings.profile(name)
    parser = get_parser(profile.tool_call_parser) if profile.tool_call_parser else None
    return Profile(name=name, settings=profile, parser=parser, a2ui=settings.a2ui)


def plan_output(request: ChatRequest, profile: Profile) -> OutputPlan:
    """The output plan: forced tool call > response_format > the profile's default schema > text."""
    if request.tools and profile.parser is None:
        raise BadRequestError(f"specialist {profile.name} does not take tools; send them to the agent specialist")
    if request.tool_choice.forces_call:
        assert profile.parser is not None
        tools = request.tools
        if request.tool_choice.function_name:
            tools = tuple(t for t in tools if t.name == request.tool_choice.function_name)
        return OutputPlan("forced_tool", profile.parser.forced_call_schema(tools))
    fmt = request.response_format
    if fmt.type == "json_schema" and fmt.schema is None:  # a named format (macaron.prompting.formats)
        return _named_plan(fmt.name, profile)
    if fmt.type == "json_schema":
        return OutputPlan("json", fmt.schema)
    if fmt.type == "json_object":
        return OutputPlan("json", JSON_OBJECT_SCHEMA)
    if not request.response_format_given and profile.settings.output_schema != "none":
        return _named_plan(DEFAULT_FORMATS[profile.settings.output_schema], profile)
    if request.tools and request.tool_choice.mode != "none":
        return OutputPlan("tools")
    return OutputPlan("text")


DEFAULT_FORMATS = {"ui": "macaron_ui_v1", "a2ui": "a2ui_v0_9"}


def output_schema(name: str, profile: Profile) -> dict[str, Any]:
    """The JSON schema of a named format (`macaron.prompting.formats`) as this profile bounds it."""
    if name == "macaron_ui_v1":
        return ui_schema()
    if name == "a2ui_v0_9":
        from macaron.a2ui.grammar import a2ui_schema  # imports the A2UI SDK: only where A2UI is served

        return a2ui_schema(profile.a2ui)
    raise BadRequestError(f"response_format names {name!r}, which needs its schema")


def default_schema_json(profile: Profile) -> str:
    """The schema a request without response_format is constrained to, as JSON text ("" for none)."""
    kind = profile.settings.output_schema
    return "" if kind == "none" else json.dumps(output_schema(DEFAULT_FORMATS[kind], profile), separators=(",", ":"))


def _named_plan(name: str, profile: Profile) -> OutputPlan:
    return OutputPlan("ui" if name == "macaron_ui_v1" else "a2ui", output_schema(name, profile))
