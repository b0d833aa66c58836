"""Trains the tiny byte-level BPE tokenizer and wraps it for `AutoTokenizer`.

Byte-level, so every UTF-8 string (emoji, CJK, control characters) round-trips whatever the
training text held; trained locally on `corpus.training_corpus()`, so nothing is downloaded.
No normalizer and no whitespace clean-up: decode(encode(text)) == text exactly.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from macaron.assets.chat_template import (
    CHAT_TEMPLATE,
    END_OF_TEXT,
    IM_END,
    IM_START,
    TOOL_CALL_END,
    TOOL_CALL_START,
    TOOL_RESPONSE_END,
    TOOL_RESPONSE_START,
)
from macaron.assets.corpus import training_corpus

# Control tokens: skipped by decode(skip_special_tokens=True); lowest ids, in this order.
SPECIAL_TOKENS: tuple[str, ...] = (END_OF_TEXT, IM_START, IM_END)
# Markup the tool-call parser must see in decoded text, so added as ordinary (non-special) tokens.
MARKUP_TOKENS: tuple[str, ...] = (TOOL_CALL_START, TOOL_CALL_END, TOOL_RESPONSE_START, TOOL_RESPONSE_END)


def train_tokenizer(vocab_size: int) -> Tokenizer:
    """A byte-level BPE of at most `vocab_size` entries (specials and markup included).

    The trainer is deterministic for a fixed corpus: merges are ranked by count, ties by pair.
    """
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(MARKUP_TOKENS),
        min_frequency=1,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(training_corpus(), trainer=trainer)
    tokenizer.add_tokens([AddedToken(token, special=False, normalized=False) for token in MARKUP_TOKENS])
    return tokenizer


def wrap_tokenizer(tokenizer: Tokenizer, model_max_length: int) -> PreTrainedTokenizerFast:
    """The transformers view: eos/pad tokens, the chat template, no BOS, no space clean-up."""
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=END_OF_TEXT,
        pad_token=END_OF_TEXT,
        extra_special_tokens=[IM_START, IM_END],
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
        chat_template=CHAT_TEMPLATE,
    )


def build_tokenizer(out_dir: Path, vocab_size: int, model_max_length: int) -> PreTrainedTokenizerFast:
    """Trains, wraps and saves the tokenizer into `out_dir`; returns it."""
    wrapped = wrap_tokenizer(train_tokenizer(vocab_size), model_max_length)
    wrapped.save_pretrained(str(out_dir))
    return wrapped
