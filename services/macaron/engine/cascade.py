"""Cascade (shared-prefix) decode attention: rows behind the same cached prefix read it once.

Decode rows that hit the prefix cache on the same prompt hold the same leading KV blocks (same
block ids, hence the same adapter version: a block's hash chains the adapter's cache key). Read
through each row's own contiguous copy, that prefix is streamed from memory once per row and
step; at 1 k context it was most of a decode step. Here a group of such rows attends to the
prefix once: one batched matmul of all the group's queries against one copy of it, then each
row's own suffix, and the two partial softmaxes are merged exactly with their log-sum-exp
(FlashInfer's cascade attention; the online-softmax merge of FlashAttention).

Group detection is exact: rows are grouped by their first block id, and the prefix is the run of
leading blocks every member holds at the same index (and that every member has computed).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from macaron.engine.contiguous_kv import ContiguousKV

MIN_PREFIX = 64
"""Fewer shared tokens than this: the rows keep their own path (the merge's fixed cost wins)."""


@dataclass
class CascadeGroup:
    """Decode rows that share the K/V of positions [0, prefix_len): they read it from `leader`."""

    members: list[tuple[int, ContiguousKV, int]]
    """(decode row, its contiguous copy, the position it writes), as in BatchContext.decode_contiguous."""
    prefix_len: int
    leader: ContiguousKV
    rows: torch.Tensor
    """[G] the members' decode rows (index into the step's tokens)."""


def shared_prefix_groups(
    rows: list[tuple[int, ContiguousKV, int]], block_size: int, min_prefix: int = MIN_PREFIX
) -> tuple[list[CascadeGroup], list[tuple[int, ContiguousKV, int]]]:
    """Splits decode rows with contiguous copies into groups of 2+ rows sharing at least
    `min_prefix` tokens of identical blocks, and the rest (loners)."""
    buckets: dict[int, list[tuple[int, ContiguousKV, int]]] = {}
    loners: list[tuple[int, ContiguousKV, int]] = []
    for entry in rows:
        blocks = entry[1].blocks
        if blocks:
            buckets.setdefault(blocks[0], []).append(entry)
        else:
            loners.append(entry)
    groups: list[CascadeGroup] = []
    for members in buckets.values():
        prefix = _common_prefix(members, block_size) if len(members) > 1 else 0
        if prefix < min_prefix:
            loners.extend(members)
            continue
        device = members[0][1].data.device
        groups.append(
            CascadeGroup(
                members=members,
                prefix_len=prefix,
                leader=members[0][1],
                rows=torch.tensor([row for row, _, _ in members], dtype=torch.long, device=device),
            )
        )
    return groups, loners


def _common_prefix(members: list[tuple[int, ContiguousKV, int]], block_size: int) -> int:
    """Tokens of the leading blocks all members hold at the same index, capped at what each has
    computed (positions below its own `pos`)."""
    tables = [copy.blocks for _, copy, _ in members]
    first = tables[0]
    n = min(len(t) for t in tables)
    i = 0
    while i < n and all(t[i] == first[i] for t in tables):
        i += 1
    return min(i * block_size, min(pos for _, _, pos in members))


def attend_cascade(
    q: torch.Tensor, prefix_kv: torch.Tensor, suffix_kv: list[torch.Tensor], scale: float
) -> torch.Tensor:
    """Attention of G query tokens over one shared prefix and each one's own suffix, exact.

    q [G, H, D]; prefix_kv [2, Hkv, P, D] (P >= 1); suffix_kv[g] [2, Hkv, S_g, D] (S_g may be 0).
    GQA by grouping the query heads of a KV head, as `attend_contiguous`. Returns [G, H, D]."""
    g, heads, dim = q.shape
    heads_kv = prefix_kv.shape[1]
    r = heads // heads_kv
    qs = (q * scale).view(g, heads_kv, r, dim)
    # the prefix once for the whole group: [Hkv, G*r, D] x [Hkv, D, P]
    qp = qs.transpose(0, 1).reshape(heads_kv, g * r, dim)
    sp = torch.bmm(qp, prefix_kv[0].transpose(1, 2)).float()
    mp = sp.amax(dim=-1, keepdim=True)
    ep = torch.exp(sp - mp)
    lp = ep.sum(dim=-1, keepdim=True)
    op = torch.bmm(ep.to(prefix_kv.dtype), prefix_kv[1]).float()
    # back to [G, Hkv, r, ...]
    mp, lp, op = (t.view(heads_kv, g, r, -1).transpose(0, 1) for t in (mp, lp, op))
    # each row's suffix, padded to the longest and masked
    longest = max(s.shape[2] for s in suffix_kv)
    if longest == 0:
        return (op / lp).to(q.dtype).reshape(g, heads, dim)
    lengths = [s.shape[2] for s in suffix_kv]
    if all(n == longest for n in lengths):
        kv = torch.stack(suffix_kv)  # [G, 2, Hkv, S, D]
    else:
        kv = q.new_zeros(g, 2, heads_kv, longest, dim)
        for i, s in enumerate(suffix_kv):
            kv[i, :, :, : s.shape[2]].copy_(s)
    ss = torch.matmul(qs, kv[:, 0].transpose(2, 3)).float()  # [G, Hkv, r, S]
    if any(n < longest for n in lengths):
        valid = torch.arange(longest, device=q.device)[None, :] < torch.tensor(lengths, device=q.device)[:, None]
        ss.masked_fill_(~valid[:, None, None, :], float("-inf"))
    m = torch.maximum(mp, ss.amax(dim=-1, keepdim=True))  # finite: the prefix is never empty
    es = torch.exp(ss - m)
    alpha = torch.exp(mp - m)
    os_ = torch.matmul(es.to(kv.dtype), kv[:, 1]).float()
    out = (alpha * op + os_) / (alpha * lp + es.sum(dim=-1, keepdim=True))
    return out.to(q.dtype).reshape(g, heads, dim)
