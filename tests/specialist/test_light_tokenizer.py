"""The tokenizer without transformers renders and counts exactly as transformers does, and loads without torch."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from macaron.prompting import ChatRequest, Message, ToolCall, ToolChoice, ToolSpec, render
from macaron.prompting.tokenizer import LightTokenizer, load_light_tokenizer
from macaron.specialist.logprobs import TokenBytes


@dataclass
class P:
    system_prompt: str = "You are the profile."
    tool_call_prefix: str = "<tool_call>\n"


WEATHER = ToolSpec("get_weather", "Weather now", {"type": "object", "properties": {"city": {"type": "string"}}})
REQUESTS = {
    "plain": ChatRequest(messages=(Message("user", "Hello there!"),)),
    "systems and turns": ChatRequest(messages=(
        Message("system", "Be brief."), Message("user", "Hi"), Message("assistant", "Hello."),
        Message("system", "late rule"), Message("user", "Naïve café, 東京 and emoji 🚀?"))),
    "tools and results": ChatRequest(messages=(
        Message("user", "Weather in Paris?"),
        Message("assistant", "", tool_calls=(ToolCall("call_1", "get_weather", '{"city": "Paris", "days": [1, 2]}'),)),
        Message("tool", '{"temp": 21}', tool_call_id="call_1"), Message("user", "And in Zürich?")),
        tools=(WEATHER,)),
    "forced call": ChatRequest(messages=(Message("user", "hi"),), tools=(WEATHER,), tool_choice=ToolChoice("required")),
    "tools hidden": ChatRequest(messages=(Message("user", "hi"),), tools=(WEATHER,), tool_choice=ToolChoice("none")),
}


@pytest.fixture(scope="module", params=["tiny", "smollm2"])
def model_dir(request: pytest.FixtureRequest, macaron_cache_dir: Path) -> Path:
    if request.param == "tiny":
        return request.getfixturevalue("tiny_model").model_dir
    from macaron.assets.smollm2 import ensure_smollm2_model

    return ensure_smollm2_model(macaron_cache_dir, progress=False).model_dir


@pytest.fixture(scope="module")
def pair(model_dir: Path) -> tuple[LightTokenizer, object]:
    from transformers import AutoTokenizer

    light = load_light_tokenizer(model_dir)
    assert light is not None
    return light, AutoTokenizer.from_pretrained(str(model_dir))


@pytest.mark.parametrize("name", list(REQUESTS))
def test_same_prompt_text_and_token_ids_as_transformers(pair, name: str) -> None:
    light, hf = pair
    text = render(REQUESTS[name], P(), light)
    assert text == render(REQUESTS[name], P(), hf)
    ids = light(text, add_special_tokens=False)["input_ids"]
    assert ids == hf(text, add_special_tokens=False)["input_ids"] and len(ids) > 5
    assert light.decode(ids) == hf.decode(ids)
    assert light.convert_ids_to_tokens(ids) == hf.convert_ids_to_tokens(ids)


def test_token_bytes_and_limits_match(pair) -> None:
    light, hf = pair
    ids = light.encode("Naïve café 東京 🚀\n\tx = {'a': 1}", add_special_tokens=False)
    assert [TokenBytes(light)(i) for i in ids] == [TokenBytes(hf)(i) for i in ids]
    assert light.model_max_length == hf.model_max_length
    assert light.special_tokens["eos_token"] == hf.eos_token


def test_generation_prompt_and_tokenize_options(pair) -> None:
    light, hf = pair
    conversation = [{"role": "user", "content": "hi"}]
    for flag in (False, True):
        assert light.apply_chat_template(conversation, add_generation_prompt=flag) == hf.apply_chat_template(
            conversation, add_generation_prompt=flag, tokenize=False)
    assert light.apply_chat_template(conversation, tokenize=True) == light.encode(
        light.apply_chat_template(conversation), add_special_tokens=False)


def test_template_errors_surface_as_in_transformers(tmp_path: Path, model_dir: Path) -> None:
    import jinja2

    for name in ("tokenizer.json",):
        (tmp_path / name).write_bytes((model_dir / name).read_bytes())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "eos_token": {"content": "<|im_end|>", "special": True},
        "chat_template": [{"name": "default", "template": "{{ raise_exception('no ' + eos_token) }}"}]}))
    light = load_light_tokenizer(tmp_path)
    assert light is not None and light.special_tokens == {"eos_token": "<|im_end|>"}
    with pytest.raises(jinja2.exceptions.TemplateError, match="no <|im_end|>"):
        light.apply_chat_template([{"role": "user", "content": "hi"}])
    (tmp_path / "tokenizer_config.json").write_text("{}")  # no chat template: the caller falls back to transformers
    assert load_light_tokenizer(tmp_path) is None
    assert load_light_tokenizer(tmp_path / "missing") is None


def test_specialist_loads_its_tokenizer_without_torch(model_dir: Path) -> None:
    """What a specialist (or Ray Serve specialist replica) does at start: no transformers, hence no torch."""
    script = (
        "import sys\n"
        "from macaron.config import MacaronSettings\n"
        "from macaron.specialist.server import build_pipelines, load_tokenizer\n"
        f"settings = MacaronSettings(specialists={{'tokenizer_path': {str(model_dir)!r}}})\n"
        "tokenizer = load_tokenizer(settings)\n"
        "pipelines = build_pipelines(settings, ['chat', 'agent', 'code', 'ui'], tokenizer)\n"
        "print(type(tokenizer).__name__, 'torch' in sys.modules, 'transformers' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["LightTokenizer", "False", "False"], out.stderr[-2000:]


def test_a_conversation_reuses_its_pieces_and_gets_the_same_ids(pair) -> None:
    """The segment cache (pieces between special tokens remembered) gives exactly the backend's and transformers'
    ids, turn after turn, with special-token text inside a message, and reuses the earlier turns' pieces."""
    from macaron.prompting.segment_cache import SegmentCache

    light, hf = pair
    special = next(iter(light.backend.get_added_tokens_decoder().values())).content
    light = LightTokenizer(light.backend, light.templates, light.special_tokens, light.model_max_length)  # fresh cache
    system = Message("system", "You are the ACME assistant. Answer in two sentences, cite the docs. " * 12)
    turns: list[Message] = [system]
    for i, user in enumerate(["how do I list files by size?", f"and {special} only the top 5?", "  Naïve 東京 🚀\n\n\t",
                              "thanks"]):
        turns.append(Message("user", user))
        text = render(ChatRequest(messages=tuple(turns)), P(), light)
        ids = light.encode(text, add_special_tokens=False)
        assert ids == light.backend.encode(text, add_special_tokens=False).ids
        assert ids == hf(text, add_special_tokens=False)["input_ids"]
        turns.append(Message("assistant", f"Answer {i}: use `ls -lS | head`. " * 4))
    cache = light._segments
    assert isinstance(cache, SegmentCache) and cache.hits >= 6  # the system prompt and earlier turns, each turn
    for text in ["", special, special * 3, f"x{special}", f"{special}y\n", "plain text, no specials"]:
        assert light.encode(text, add_special_tokens=False) == light.backend.encode(text, add_special_tokens=False).ids


def test_no_segment_cache_where_splitting_could_change_the_ids() -> None:
    """A normalizer, or an added token matched with lstrip/rstrip, can make pieces encode differently alone: no
    cache there (encode falls back to the backend)."""
    from tokenizers import AddedToken, Tokenizer, models, normalizers

    from macaron.prompting.segment_cache import SegmentCache

    def word_level(token: AddedToken, normalizer: object | None) -> Tokenizer:
        backend = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
        backend.add_special_tokens([token])
        if normalizer is not None:
            backend.normalizer = normalizer
        return backend

    assert SegmentCache.for_backend(word_level(AddedToken("<s>", special=True, normalized=False), None)) is not None
    assert SegmentCache.for_backend(word_level(AddedToken("<s>", special=True, normalized=False),
                                               normalizers.Lowercase())) is None
    assert SegmentCache.for_backend(word_level(AddedToken("<s>", special=True, normalized=False, lstrip=True),
                                               None)) is None


def test_the_segment_cache_stays_within_its_budget(pair, monkeypatch: pytest.MonkeyPatch) -> None:
    """Old pieces are dropped once the remembered ids pass the budget; ids stay right after eviction."""
    from macaron.prompting import segment_cache
    from macaron.prompting.segment_cache import SegmentCache

    monkeypatch.setattr(segment_cache, "MAX_TOKENS", 400)
    light, _ = pair
    cache = SegmentCache.for_backend(light.backend)
    assert cache is not None
    special = next(iter(cache.ids_of))
    texts = [f"piece number {i}: " + "some words that make a longer piece " * 4 for i in range(40)]
    for i, text in enumerate(texts + texts[:3]):
        prompt = f"{special}{text}{special}"
        assert cache.encode(prompt) == light.backend.encode(prompt, add_special_tokens=False).ids
        assert cache._tokens <= 400 and cache._tokens == sum(len(v) for v in cache._pieces.values())
        if i == len(texts) - 1:
            assert texts[0] not in cache._pieces and texts[-1] in cache._pieces
    assert texts[2] in cache._pieces  # encoded again after its eviction, remembered again


def test_render_key_names_the_tokenizer_and_the_profile(pair, model_dir: Path, tmp_path: Path) -> None:
    """Two loads of the same files agree; another template, system prompt or tool-call prefix gives another key;
    a tokenizer without an identity (loaded through transformers) gives none, so its ids are never handed on."""
    from macaron.prompting import render_key

    light, hf = pair
    again = load_light_tokenizer(model_dir)
    assert render_key(P(), light) == render_key(P(), again) is not None
    assert render_key(P(system_prompt="Another profile."), light) != render_key(P(), light)
    assert render_key(P(tool_call_prefix="<call>"), light) != render_key(P(), light)
    assert render_key(P(), hf) is None
    changed = tmp_path / "changed"
    changed.mkdir()
    for f in model_dir.iterdir():
        if f.is_file() and f.name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            (changed / f.name).write_bytes(f.read_bytes())
    template = changed / "chat_template.jinja"
    if template.is_file():
        template.write_text(template.read_text() + "\n")
    else:
        config = json.loads((changed / "tokenizer_config.json").read_text())
        config["chat_template"] += "\n"
        (changed / "tokenizer_config.json").write_text(json.dumps(config))
    assert render_key(P(), load_light_tokenizer(changed)) != render_key(P(), light)
