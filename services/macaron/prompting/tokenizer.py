"""A model's tokenizer without transformers: `tokenizer.json` (Hugging Face `tokenizers`) plus its chat template (jinja2).

Specialists, routers and their Ray Serve replicas only render prompts and count tokens; loading
the tokenizer through transformers imports torch (tens of seconds and hundreds of MB per process
on a small machine) for nothing. `LightTokenizer` answers the part of transformers' tokenizer API
they use (`apply_chat_template`, `__call__`, `encode`, `decode`, `convert_ids_to_tokens`,
`model_max_length`) from the same files, with the template rendered the way transformers renders
it (sandboxed jinja2, trimmed blocks, `tojson` without ASCII escapes, `raise_exception`,
`strftime_now`, the special tokens as variables), so the prompt text is the same.

`load_light_tokenizer(path)` returns None for a directory without `tokenizer.json` or a chat
template (a slow, SentencePiece-only tokenizer): the caller falls back to transformers.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from macaron.prompting.segment_cache import SegmentCache

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
TEMPLATE_FILE = "chat_template.jinja"
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
NO_LIMIT = int(1e30)
"""transformers' model_max_length when the configuration names none (`VERY_LARGE_INTEGER`)."""


class LightTokenizer:
    """Encodes with a `tokenizers.Tokenizer` and renders chat templates with jinja2."""

    def __init__(self, tokenizer: Any, templates: dict[str, str], special_tokens: dict[str, str],
                 model_max_length: int = NO_LIMIT, identity: str = "") -> None:
        self.backend = tokenizer
        self.templates = templates
        """Template name → source; "default" is the chat template, "tool_use" (when present) is used with tools."""
        self.special_tokens = special_tokens
        self.model_max_length = model_max_length
        self.identity = identity
        """A digest of everything that decides this tokenizer's text and ids (its tokenizer.json, templates and
        special tokens); two processes with the same identity render and tokenize a request alike. "" when unknown."""

    # ------------------------------------------------------------ chat templates

    def apply_chat_template(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, *,
                            tokenize: bool = False, add_generation_prompt: bool = False,
                            chat_template: str | None = None, **kwargs: Any) -> Any:
        """The conversation rendered by the chat template (its token ids when `tokenize`)."""
        source = chat_template or (self.templates.get("tool_use") if tools else None) or self.templates.get("default")
        if source is None:
            raise ValueError("this tokenizer has no chat template")
        text = self._compile(source).render(messages=conversation, tools=tools, documents=None,
                                            add_generation_prompt=add_generation_prompt,
                                            **{**self.special_tokens, **kwargs})
        return self.encode(text, add_special_tokens=False) if tokenize else text

    def compile_templates(self) -> None:
        """Compiles every chat template now: a first request must not pay for it (tens to hundreds of ms). A
        template that does not compile is left for the first render to report, as before."""
        import jinja2

        for source in self.templates.values():
            try:
                self._compile(source)
            except jinja2.TemplateError:
                pass

    def _compile(self, source: str) -> Any:
        compiled = self._compiled.get(source)
        if compiled is None:
            compiled = self._compiled[source] = self._environment.from_string(source)
        return compiled

    @cached_property
    def _compiled(self) -> dict[str, Any]:
        return {}

    @cached_property
    def _environment(self) -> Any:
        import jinja2
        import jinja2.ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise jinja2.exceptions.TemplateError(message)

        def tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
                   separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
            return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                              sort_keys=sort_keys)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        return env

    # ------------------------------------------------------------ tokens

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """The text's ids; a rendered prompt (no special tokens added) reuses the ids of the pieces between its
        special tokens that this process encoded recently (`segment_cache`: the same ids, a fraction of the time)."""
        if not add_special_tokens and self._segments is not None:
            return self._segments.encode(text)
        return list(self.backend.encode(text, add_special_tokens=add_special_tokens).ids)

    @cached_property
    def _segments(self) -> SegmentCache | None:
        return SegmentCache.for_backend(self.backend)

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        return {"input_ids": self.encode(text, add_special_tokens=add_special_tokens)}

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return str(self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def convert_ids_to_tokens(self, ids: int | list[int]) -> Any:
        if isinstance(ids, int):
            return self.backend.id_to_token(ids)
        return [self.backend.id_to_token(i) for i in ids]

    def __len__(self) -> int:
        return int(self.backend.get_vocab_size(with_added_tokens=True))


def load_light_tokenizer(path: str | Path) -> LightTokenizer | None:
    """The directory's tokenizer without transformers, or None when it lacks tokenizer.json or a chat template."""
    folder = Path(path)
    if not (folder / TOKENIZER_FILE).is_file():
        return None
    config: dict[str, Any] = {}
    if (folder / CONFIG_FILE).is_file():
        config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
    templates = _templates(folder, config)
    if not templates:
        return None
    from tokenizers import Tokenizer

    special = {name: _token_text(config[name]) for name in SPECIAL_TOKENS if config.get(name) is not None}
    limit = config.get("model_max_length")
    raw = (folder / TOKENIZER_FILE).read_bytes()
    tokenizer = LightTokenizer(Tokenizer.from_str(raw.decode("utf-8")), templates, special,
                               int(limit) if isinstance(limit, (int, float)) else NO_LIMIT,
                               identity=_identity(raw, templates, special))
    tokenizer.compile_templates()
    return tokenizer


def _identity(tokenizer_json: bytes, templates: dict[str, str], special: dict[str, str]) -> str:
    digest = hashlib.blake2b(tokenizer_json, digest_size=16)
    digest.update(json.dumps([templates, special], sort_keys=True).encode("utf-8"))
    return digest.hexdigest()


def _templates(folder: Path, config: dict[str, Any]) -> dict[str, str]:
    """The chat templates: chat_template.jinja (newer saves), else tokenizer_config.json's chat_template."""
    if (folder / TEMPLATE_FILE).is_file():
        return {"default": (folder / TEMPLATE_FILE).read_text(encoding="utf-8")}
    value = config.get("chat_template")
    if isinstance(value, str):
        return {"default": value}
    if isinstance(value, list):  # several named templates
        return {str(t["name"]): str(t["template"]) for t in value if isinstance(t, dict) and "name" in t}
    return {}


def _token_text(value: Any) -> str:
    """A special token as configured: a string, or an AddedToken's dict (its `content`)."""
    return str(value.get("content", "")) if isinstance(value, dict) else str(value)


__all__ = ["LightTokenizer", "load_light_tokenizer"]
