"""Constrained decoding: every json_schema / regex output validates; free rows are undisturbed."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from macaron.engine import GenerateRequest, SamplingParams
from macaron.engine.protocol import InvalidRequestError

from .helpers import PROMPTS, greedy, run_all

SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 12},
        "priority": {"type": "integer", "minimum": 0, "maximum": 9},
        "done": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
        "widgets": {
            "type": "array",
            "maxItems": 2,
            "items": {
                "type": "object",
                "properties": {"kind": {"enum": ["button", "text", "image"]}, "size": {"type": "integer", "minimum": 1, "maximum": 99}},
                "required": ["kind", "size"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["title", "priority", "done", "tags", "widgets"],
    "additionalProperties": False,
}
REGEX = r"(yes|no|maybe)-[0-9]{2,4}( [a-z]{1,5}){0,3}"


def _sampled(seed: int, **constraint) -> SamplingParams:
    # the tiny model's logits are spread by hundreds: temperature 100 explores the grammar
    return SamplingParams(temperature=100.0, max_new_tokens=256, sampling_seed=seed, **constraint)


def test_json_schema_outputs_always_validate(engine):
    reqs = [
        GenerateRequest(rid=f"j{i}", prompt=PROMPTS[i % 4], sampling=_sampled(i, json_schema=SCHEMA), lora_path=["ui", None, "chat"][i % 3])
        for i in range(50)
    ]
    outs = run_all(engine, reqs)
    kinds = set()
    for out in outs.values():
        assert out.finish_reason["type"] == "stop", out.finish_reason
        value = json.loads(out.text)
        jsonschema.validate(value, SCHEMA)
        assert not any(ord(c) < 0x20 for c in out.text)
        kinds.update(w["kind"] for w in value["widgets"])
    assert len({o.text for o in outs.values()}) > 40  # the samples really differ
    assert kinds  # nested arrays of objects were produced


def test_regex_outputs_always_match(engine):
    reqs = [GenerateRequest(rid=f"r{i}", prompt=PROMPTS[i % 4], sampling=_sampled(i, regex=REGEX), lora_path="code") for i in range(50)]
    outs = run_all(engine, reqs)
    for out in outs.values():
        assert out.finish_reason["type"] == "stop", out.finish_reason
        assert re.fullmatch(REGEX, out.text), out.text


def test_ebnf_and_greedy_constraint(engine):
    grammar = 'root ::= "answer: " ("left" | "right") "."'
    outs = run_all(engine, [GenerateRequest(rid="e", prompt=PROMPTS[0], sampling=greedy(32, ebnf=grammar))])
    assert re.fullmatch(r"answer: (left|right)\.", outs["e"].text)


def test_free_rows_are_undisturbed_by_constrained_rows(engine):
    free = [GenerateRequest(rid=f"free-{a}-{i}", prompt=p, sampling=greedy(12, ignore_eos=True), lora_path=a) for i, p in enumerate(PROMPTS) for a in (None, "agent")]
    alone = {r.rid: run_all(engine, [r])[r.rid].output_ids for r in free}
    constrained = [GenerateRequest(rid=f"con-{i}", prompt=PROMPTS[i % 4], sampling=_sampled(i, json_schema=SCHEMA)) for i in range(6)]
    mixed = [r for pair in zip(constrained, free) for r in pair] + free[len(constrained):]
    outs = run_all(engine, mixed, stagger=1)
    assert {k: v.output_ids for k, v in outs.items() if k.startswith("free")} == alone


@pytest.mark.parametrize(
    "constraint, message",
    [
        ({"json_schema": '{"type": "object", "properties": '}, "json_schema is not valid JSON"),
        ({"regex": "(unclosed"}, "regex could not be compiled"),
        ({"ebnf": "root ::= missing_rule"}, "ebnf could not be compiled"),
        ({"regex": "a", "json_schema": {"type": "string"}}, "only one of json_schema, regex, ebnf"),
    ],
)
def test_bad_constraints_are_refused(engine, constraint, message):
    with pytest.raises(InvalidRequestError, match=message):
        engine.add_request(GenerateRequest(rid="bad", prompt="x", sampling=SamplingParams(**constraint)))
