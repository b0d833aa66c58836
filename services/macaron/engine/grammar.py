"""Constrained decoding with xgrammar: compiled grammars (cached), one matcher per row, validation.

Rows without a constraint pay nothing. xgrammar 0.2.9 may let raw control characters through
strings with maxLength, so json_schema rows also never get tokens holding a raw control
character (valid compact JSON never has one), and every finished constrained output is
validated (json.loads + jsonschema, re.fullmatch) before it is returned.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from macaron.engine.sequence import Sequence


class GrammarError(ValueError):
    """A constraint that cannot be compiled; the message says which and why."""


class GrammarState:
    """One row's matcher plus what is needed to validate its output."""

    def __init__(self, kind: str, spec: str, matcher: Any, control_mask: torch.Tensor | None) -> None:
        self.kind = kind
        self.spec = spec
        self.matcher = matcher
        self.control_mask = control_mask if kind == "json_schema" else None

    def accept(self, token_id: int) -> bool:
        return bool(self.matcher.accept_token(token_id))

    @property
    def is_terminated(self) -> bool:
        return bool(self.matcher.is_terminated())

    def validate(self, text: str) -> str | None:
        """None when `text` satisfies the constraint, else why not."""
        if self.kind == "json_schema":
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                return f"output is not valid JSON: {exc}"
            import jsonschema

            try:
                jsonschema.validate(value, json.loads(self.spec))
            except jsonschema.ValidationError as exc:
                return f"output does not match the JSON schema: {exc.message}"
            return None
        if self.kind == "regex":
            try:
                ok = re.fullmatch(self.spec, text, flags=re.DOTALL) is not None
            except re.error:
                return None  # a pattern only xgrammar understands: the matcher's word stands
            return None if ok else "output does not match the regex"
        return None if self.is_terminated else "output does not complete the grammar"


class GrammarBackend:
    """Compiles constraints for one tokenizer; compiled grammars are cached by (kind, spec)."""

    def __init__(
        self,
        tokenizer: Any,
        vocab_size: int,
        stop_token_ids: list[int],
        cache_size: int = 256,
        device: torch.device | str = "cpu",
    ) -> None:
        import xgrammar as xgr

        self._xgr = xgr
        self.vocab_size = vocab_size
        self.info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=stop_token_ids)
        self.compiler = xgr.GrammarCompiler(self.info, max_threads=2, cache_enabled=True)
        self._cache: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self.control_mask = self._control_token_mask().to(device)

    def _control_token_mask(self) -> torch.Tensor:
        """True for tokens whose bytes contain a raw control character (< 0x20)."""
        mask = torch.zeros(self.vocab_size, dtype=torch.bool)
        special = set(self.info.special_token_ids)
        for i, token in enumerate(self.info.decoded_vocab[: self.vocab_size]):
            if i not in special and any(b < 0x20 for b in token):
                mask[i] = True
        return mask

    def compile(self, kind: str, spec: str) -> Any:
        key = (kind, spec)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        try:
            if kind == "json_schema":
                compiled = self.compiler.compile_json_schema(spec, any_whitespace=False, strict_mode=True)
            elif kind == "regex":
                compiled = self.compiler.compile_regex(spec)
            elif kind == "ebnf":
                compiled = self.compiler.compile_grammar(spec)
            else:
                raise GrammarError(f"unknown constraint kind {kind!r}")
        except GrammarError:
            raise
        except Exception as exc:  # xgrammar raises RuntimeError / its own errors with a message
            raise GrammarError(f"{kind} could not be compiled: {exc}") from exc
        with self._lock:
            self._cache[key] = compiled
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return compiled

    def new_state(self, kind: str, spec: str) -> GrammarState:
        matcher = self._xgr.GrammarMatcher(self.compile(kind, spec))
        return GrammarState(kind, spec, matcher, self.control_mask)


def apply_grammar_masks(logits: torch.Tensor, seqs: list[Sequence]) -> None:
    """Masks each constrained row's logits to the tokens its grammar allows next."""
    rows = [i for i, s in enumerate(seqs) if s.grammar is not None]
    if not rows:
        return
    import xgrammar as xgr

    vocab = logits.shape[1]
    bitmask = xgr.allocate_token_bitmask(len(seqs), vocab)  # filled on the host by the matchers
    for i in rows:
        g = seqs[i].grammar
        assert g is not None
        g.matcher.fill_next_token_bitmask(bitmask, i)
        if g.control_mask is not None:
            logits[i, : g.control_mask.shape[0]].masked_fill_(g.control_mask, float("-inf"))
    xgr.apply_token_bitmask_inplace(logits, bitmask.to(logits.device), vocab_size=vocab, indices=rows)
