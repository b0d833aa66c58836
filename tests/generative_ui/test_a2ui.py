"""A2UI on the ui specialist: the grammar derived from the SDK-pruned catalog, its byte bound, SDK
validation, the teacher's skeletons, named response formats, and decoding on the tiny model's engine."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import jsonschema
import pytest

from macaron.a2ui import A2uiOutputError, A2uiSettings, a2ui_schema, basic_catalog, catalog_id, max_output_bytes, validate_a2ui
from macaron.prompting import ChatRequest, Message, ResponseFormat
from macaron.specialist.errors import OutputInvalidError
from macaron.specialist.finish import Finish
from macaron.specialist.postprocess import finish_output
from macaron.specialist.profiles import load_profile, plan_output
from macaron.specialist.settings import SpecialistsSettings
from macaron.training.a2ui_teacher import SKELETONS, fill, slots, teacher_schema

LOGIN = [
    {"version": "v0.9", "createSurface": {"surfaceId": "main", "catalogId": catalog_id()}},
    {"version": "v0.9", "updateComponents": {"surfaceId": "main", "components": [
        {"id": "root", "component": "Column", "children": ["title", "email", "go"]},
        {"id": "title", "component": "Text", "text": "Sign in", "variant": "h2"},
        {"id": "email", "component": "TextField", "label": "Email"},
        {"id": "go", "component": "Button", "child": "go_label", "action": {"event": {"name": "sign_in"}}},
        {"id": "go_label", "component": "Text", "text": "Go"},
    ]}},
]


def _largest(node: dict, root: dict) -> object:
    """The longest instance of the bounded subset (every property, every item, the widest characters)."""
    if "$ref" in node:
        return _largest(root["$defs"][node["$ref"].split("/")[-1]], root)
    if "const" in node:
        return node["const"]
    if "enum" in node:
        return max(node["enum"], key=lambda v: len(json.dumps(v, ensure_ascii=False).encode()))
    if "anyOf" in node:
        options = [_largest(b, root) for b in node["anyOf"]]
        return max(options, key=lambda v: len(json.dumps(v, ensure_ascii=False).encode()))
    if node["type"] == "object":
        return {k: _largest(v, root) for k, v in node["properties"].items()}
    if node["type"] == "array":
        prefix = [_largest(item, root) for item in node.get("prefixItems", [])]
        if node.get("items") is False:
            return prefix
        return prefix + [_largest(node["items"], root)] * (node["maxItems"] - len(prefix))
    if node["type"] == "boolean":
        return False
    pattern = node["pattern"]
    width = int(pattern.rsplit(",", 1)[1].split("}")[0])
    return "\uffff" * width if "\\uffff" in pattern else "a" + "a" * width


@pytest.mark.parametrize("settings", [A2uiSettings(), A2uiSettings(max_components=5, max_children=2, max_text_chars=8)])
def test_bound_is_tight_and_fits_the_default_budget(settings: A2uiSettings) -> None:
    schema = a2ui_schema(settings)
    jsonschema.Draft202012Validator.check_schema(schema)
    largest = _largest(schema, schema)
    jsonschema.validate(largest, schema)
    assert len(json.dumps(largest, ensure_ascii=False).encode()) == max_output_bytes(settings)
    assert max_output_bytes() == 2715 <= SpecialistsSettings().ui.max_new_tokens  # documented in docs/adapters.md


def test_grammar_is_derived_from_the_sdk_pruned_catalog() -> None:
    schema = a2ui_schema()
    kept = set(A2uiSettings().components)
    assert kept | {"text", "ident", "root"} == set(schema["$defs"])
    catalog = basic_catalog()
    for name in kept:  # every enum the grammar offers is the catalog's own
        for prop, sub in schema["$defs"][name]["properties"].items():
            if "enum" in sub:
                branches = catalog.resolved_component_schema(name)["properties"][prop]["anyOf"]
                assert sub["enum"] == next(b["enum"] for b in branches if "enum" in b)
    jsonschema.validate(LOGIN, schema)
    with pytest.raises(ValueError, match="no component Blink"):
        a2ui_schema(A2uiSettings(components=["Column", "Blink"]))
    with pytest.raises(ValueError, match="must keep Column"):
        a2ui_schema(A2uiSettings(components=["Row", "Text"]))


def test_sdk_validation_accepts_a2ui_and_names_what_is_wrong() -> None:
    assert validate_a2ui(json.dumps(LOGIN)) == LOGIN
    with_data = [*LOGIN, {"version": "v0.9", "updateDataModel": {"surfaceId": "main", "path": "/", "value": {"a": 1}}}]
    assert len(validate_a2ui(json.dumps(with_data))) == 3  # anything SDK-valid passes, not only what the grammar writes
    dangling = copy.deepcopy(LOGIN)
    dangling[1]["updateComponents"]["components"][0]["children"].append("nowhere")
    unknown = copy.deepcopy(LOGIN)
    unknown[1]["updateComponents"]["components"][1]["component"] = "Blink"
    old_version = copy.deepcopy(LOGIN)
    old_version[0]["version"] = "v0.8"
    for bad, why in [("{not json", "not valid JSON"), ('{"version": "v0.9"}', "non-empty JSON array"),
                     (json.dumps(dangling), "nowhere"), (json.dumps(unknown), "Blink"), (json.dumps(old_version), "v0.8")]:
        with pytest.raises(A2uiOutputError, match=why):
            validate_a2ui(bad)


def test_every_teacher_skeleton_is_valid_a2ui_in_the_serving_grammar() -> None:
    for name in SKELETONS:
        words = {s.name: ("open_it" if s.kind == "name" else "Words here") for s in slots(name)}
        jsonschema.validate(words, teacher_schema(name))
        messages = fill(name, words)
        validate_a2ui(json.dumps(messages))
        jsonschema.validate(messages, a2ui_schema())


def test_ui_plans_a2ui_by_default_and_the_old_schema_by_name() -> None:
    ui = load_profile(SpecialistsSettings(), "ui")
    hi = (Message("user", "a login form"),)
    assert plan_output(ChatRequest(messages=hi), ui).mode == "a2ui"
    old = ChatRequest(messages=hi, response_format=ResponseFormat("json_schema", name="macaron_ui_v1"), response_format_given=True)
    assert plan_output(old, ui).mode == "ui"
    chat = load_profile(SpecialistsSettings(), "chat")
    assert plan_output(ChatRequest(messages=hi, response_format=ResponseFormat("json_schema", name="a2ui_v0_9"),
                                   response_format_given=True), chat).mode == "a2ui"
    plan = plan_output(ChatRequest(messages=hi), ui)
    stop = Finish("stop")
    (text,) = finish_output(json.dumps(LOGIN), stop, ChatRequest(messages=hi), plan, ui, 4096)
    assert json.loads(text.text) == LOGIN
    for broken, why in [(json.dumps(LOGIN).replace('"TextField"', '"Blink"'), "Blink"),
                        (json.dumps(LOGIN).replace('"root"', '"main"'), "root")]:
        with pytest.raises(OutputInvalidError, match=f"not valid A2UI v0.9.*{why}"):
            finish_output(broken, stop, ChatRequest(messages=hi), plan, ui, 4096)


def test_pruning_keeps_the_root_tree_and_nothing_else() -> None:
    """What the small adapter adds past its interface (repeats, strays, dangling ids) is dropped before the SDK
    check; the tree under the root is untouched; a bare root is not an answer."""
    messy = copy.deepcopy(LOGIN)
    components = messy[1]["updateComponents"]["components"]
    components[0]["children"].append("nowhere")
    components += [{"id": "email", "component": "Text", "text": "repeat"}, {"id": "stray", "component": "Text", "text": "x"},
                   {"id": "box", "component": "Card", "child": "missing"}]
    with pytest.raises(A2uiOutputError, match="not valid A2UI v0.9"):
        validate_a2ui(json.dumps(messy))
    assert validate_a2ui(json.dumps(messy), prune=True) == LOGIN
    assert validate_a2ui(json.dumps(LOGIN), prune=True) == LOGIN
    lone = copy.deepcopy(LOGIN)
    lone[1]["updateComponents"]["components"][0]["children"] = ["nowhere"]
    with pytest.raises(A2uiOutputError, match="not reachable from 'root'"):  # the original, judged by the SDK
        validate_a2ui(json.dumps(lone), prune=True)


def test_gateway_takes_named_formats_without_a_schema() -> None:
    from pydantic import ValidationError

    from macaron.gateway.protocol import ResponseFormat as Wire

    assert Wire.model_validate({"type": "json_schema", "json_schema": {"name": "macaron_ui_v1"}}).json_schema.name == "macaron_ui_v1"
    with pytest.raises(ValidationError, match="macaron_ui_v1, a2ui_v0_9"):
        Wire.model_validate({"type": "json_schema", "json_schema": {"name": "mine"}})


def test_constrained_decoding_always_finishes_within_the_bound(tiny_model) -> None:
    """The tiny model sampled hot over the grammar: every answer stops, keeps the grammar and the byte bound."""
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from engine.helpers import make_engine, run_all

    from macaron.engine import GenerateRequest, SamplingParams

    engine = make_engine(tiny_model.model_dir, dict(tiny_model.adapters))
    schema = a2ui_schema()
    budget = min(max_output_bytes(), 2000)  # the tiny model's context is 2,048 tokens
    requests = [
        GenerateRequest(rid=f"r{i}", prompt=f"Design form {i}", lora_path="ui",
                        sampling=SamplingParams(temperature=100.0, max_new_tokens=budget, sampling_seed=i,
                                                json_schema=json.dumps(schema)))
        for i in range(12)
    ]
    outputs = run_all(engine, requests)
    sizes = []
    for out in outputs.values():
        assert out.finish_reason["type"] == "stop", out.finish_reason
        jsonschema.validate(json.loads(out.text), schema)
        sizes.append(len(out.text.encode()))
    assert max(sizes) <= max_output_bytes() and len({o.text for o in outputs.values()}) > 6


def test_serve_serves_the_newest_shipped_version_unless_one_is_configured() -> None:
    from macaron.assets.builtin import newest_versions
    from macaron.config import MacaronSettings
    from macaron.serve import EmbeddedStack

    shipped = {"chat": 1, "ui": 1, "ui@v2": 1, "code@v3": 1, "code@v10": 1}
    assert newest_versions(shipped) == {"ui": "v2", "code": "v10"}
    stack = EmbeddedStack(MacaronSettings(specialists={"code": {"adapter_version": "v3"}}))
    stack._serve_newest_versions(newest_versions(shipped))
    assert stack.settings.specialists.ui.adapter_version == "v2"
    assert stack.settings.specialists.code.adapter_version == "v3"  # configured: kept
    assert stack.settings.specialists.chat.adapter_version is None
