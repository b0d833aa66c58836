"""Block manager without a model: chained hashes per adapter, ref counts, revival, LRU reuse."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from macaron.engine.block_manager import BlockManager, compute_block_hash
from macaron.engine.detokenizer import IncrementalDetokenizer
from macaron.engine.sampling_params import SamplingParams
from macaron.engine.sequence import Sequence

BS = 4


def seq(tokens: list[int], adapter: str | None = None) -> Sequence:
    fake = SimpleNamespace(cache_key=adapter) if adapter else None
    return Sequence(
        "r", tokens, SamplingParams(), adapter=fake, generator=torch.Generator(), detokenizer=IncrementalDetokenizer(None)  # type: ignore[arg-type]
    )


def compute(bm: BlockManager, s: Sequence) -> None:
    """What the engine does after a forward pass: all tokens computed, full blocks hashed."""
    prev = s.num_computed_tokens
    s.num_computed_tokens = len(s)
    bm.register_computed(s, prev)


def test_hash_chains_prefix_and_adapter():
    a = compute_block_hash([1, 2, 3, 4], -1, "")
    assert a == compute_block_hash([1, 2, 3, 4], -1, "")
    assert a != compute_block_hash([1, 2, 3, 4], -1, "code#1")
    assert compute_block_hash([5, 6, 7, 8], a, "") != compute_block_hash([5, 6, 7, 8], -1, "")


def test_prefix_reuse_and_ref_counts():
    bm = BlockManager(num_blocks=8, block_size=BS)
    s1 = seq(list(range(10)))
    bm.allocate(s1)
    assert s1.num_computed_tokens == 0 and len(s1.block_table) == 3
    compute(bm, s1)
    s2 = seq(list(range(9)) + [99, 100])
    bm.allocate(s2)
    assert s2.num_computed_tokens == 8  # two full blocks shared
    assert s2.block_table[:2] == s1.block_table[:2]
    assert [bm.blocks[b].ref_count for b in s1.block_table] == [2, 2, 1]
    bm.deallocate(s1)
    bm.deallocate(s2)
    bm.check_invariants()
    assert bm.num_free_blocks == 8


def test_whole_prompt_hit_still_computes_the_last_token():
    bm = BlockManager(num_blocks=8, block_size=BS)
    s1 = seq(list(range(8)))
    bm.allocate(s1)
    compute(bm, s1)
    s2 = seq(list(range(8)))
    bm.allocate(s2)
    assert s2.num_computed_tokens == 4  # the last block is recomputed so the last token has logits


def test_adapters_never_share_blocks():
    bm = BlockManager(num_blocks=16, block_size=BS)
    tokens = list(range(12))
    base = seq(tokens)
    bm.allocate(base)
    compute(bm, base)
    for key in ("chat#1", "code#2"):
        s = seq(tokens, key)
        bm.allocate(s)
        assert s.num_computed_tokens == 0
        assert not set(s.block_table) & set(base.block_table)
        compute(bm, s)
    again = seq(tokens + [1], "chat#1")
    bm.allocate(again)
    assert again.num_computed_tokens == 12
    bm.check_invariants()


def test_freed_blocks_keep_their_hash_until_reused_lru():
    bm = BlockManager(num_blocks=4, block_size=BS)
    s1 = seq(list(range(9)))  # blocks b0 b1 b2; b0 and b1 full and hashed
    bm.allocate(s1)
    b0, b1, b2 = s1.block_table
    compute(bm, s1)
    bm.deallocate(s1)  # freed tail first: LRU order is now b3, b2, b1, b0
    other = seq([50, 51, 52, 53, 54])  # two blocks: the never-used one, then the tail b2
    bm.allocate(other)
    assert b2 in other.block_table and b0 not in other.block_table and b1 not in other.block_table
    revived = seq(list(range(9)))
    assert bm.can_allocate(revived) is False  # needs 1 fresh block, none free besides the two revived
    bm.deallocate(other)
    bm.allocate(revived)
    assert revived.num_computed_tokens == 8 and revived.block_table[:2] == [b0, b1]
    bm.deallocate(revived)
    big = seq(list(range(100, 113)))  # four blocks: every block reused, hashes dropped
    bm.allocate(big)
    assert not bm.hash_to_block_id
    bm.deallocate(big)
    bm.check_invariants()


def test_hit_confirmed_by_token_ids():
    bm = BlockManager(num_blocks=8, block_size=BS)
    s1 = seq([1, 2, 3, 4, 5])
    bm.allocate(s1)
    compute(bm, s1)
    block = bm.blocks[s1.block_table[0]]
    block.token_ids = [9, 9, 9, 9]  # as if the hash collided with other tokens
    s2 = seq([1, 2, 3, 4, 5])
    bm.allocate(s2)
    assert s2.num_computed_tokens == 0


def test_append_slot_grows_by_whole_blocks():
    bm = BlockManager(num_blocks=3, block_size=BS)
    s = seq([1, 2, 3, 4])
    bm.allocate(s)
    assert len(s.block_table) == 1
    s.token_ids.append(5)
    assert bm.can_append(s)
    bm.append_slot(s)
    assert len(s.block_table) == 2
    s.token_ids.extend([6, 7, 8])
    bm.append_slot(s)
    assert len(s.block_table) == 2
    bm.deallocate(s)
    bm.check_invariants()
