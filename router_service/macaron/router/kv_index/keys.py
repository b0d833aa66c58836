"""The index's block keys: a chain over token ids, seeded by the adapter's `lora_id`.

Engines name blocks with hashes of their own (SGLang, vLLM and the embedded engine each differ),
so the index keys a block by what it holds: key(i) = H(key(i-1), tokens of block i), the first
seeded by the event's `lora_id` (None: the base model). The router computes the same chain from
the prompt's token ids, so a request's keys are looked up without knowing any engine's hash
function; one key names a whole prefix under one adapter version (as llm-d's indexer keys vLLM's
blocks by token chunks).
"""

from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np

KEY_PREFIX = "kv:"


def lora_seed(lora_id: int | None) -> bytes:
    return hashlib.blake2b(b"base" if lora_id is None else b"lora:%d" % lora_id, digest_size=16).digest()


def next_key(previous: bytes, tokens: Sequence[int]) -> bytes:
    h = hashlib.blake2b(previous, digest_size=16)
    h.update(np.asarray(tokens, dtype=np.int64).tobytes())
    return h.digest()


def block_keys_of_tokens(token_ids: Sequence[int], *, block_size: int, lora_id: int | None,
                         max_blocks: int) -> list[str]:
    """Keys (hex) of the first `max_blocks` full blocks of a prompt's tokens.

    The engine never reuses the block holding the prompt's last token (it must compute at least
    one token), so neither do the keys: (len - 1) // block_size blocks at most."""
    if block_size <= 0:
        raise ValueError("block_size must be positive")
    n = min((len(token_ids) - 1) // block_size, max_blocks) if token_ids else 0
    previous = lora_seed(lora_id)
    out = []
    for i in range(n):
        previous = next_key(previous, token_ids[i * block_size : (i + 1) * block_size])
        out.append(previous.hex())
    return out
