"""Logits to token ids, per row: bias, penalties, min_new_tokens, grammar mask, greedy or sampled.

Rows that asked for logprobs get them from the distribution the token is drawn from: after bias,
penalties, min_new_tokens and the grammar mask, divided by the temperature (greedy rows use 1),
before top-k / top-p / min-p truncation (SGLang's processed logprobs; OpenAI documents the
log probability of the token, not of a truncated distribution). A token the mask forbids has
-inf, sent as LOGPROB_FLOOR (OpenAI's -9999.0) because JSON has no infinity.

Every step is batched over the rows that need it; rows that need nothing pay nothing. A sampled
row draws one uniform number from its own torch.Generator and inverts its own CDF, so the same
seed gives the same tokens whatever else is in the batch.
"""

from __future__ import annotations

import torch

from macaron.engine.grammar import apply_grammar_masks
from macaron.engine.sequence import Sequence


LOGPROB_FLOOR = -9999.0
"""OpenAI's value for "very unlikely"; also keeps -inf out of JSON."""


class Sampler:
    def __init__(self, vocab_size: int, eos_token_ids: set[int]) -> None:
        self.vocab_size = vocab_size
        self.eos_token_ids = sorted(eos_token_ids)

    def __call__(self, logits: torch.Tensor, seqs: list[Sequence]) -> list[int]:
        """logits: [len(seqs), vocab] float32, modified in place."""
        self._apply_bias_and_penalties(logits, seqs)
        self._apply_min_new_tokens(logits, seqs)
        apply_grammar_masks(logits, seqs)
        tokens = self._choose(logits, seqs)
        if any(s.return_logprob for s in seqs):
            record_logprobs(logits, seqs, tokens)
        return tokens

    def _choose(self, logits: torch.Tensor, seqs: list[Sequence]) -> list[int]:
        greedy = [i for i, s in enumerate(seqs) if s.sampling.is_greedy]
        if len(greedy) == len(seqs):
            return logits.argmax(dim=-1).tolist()
        dev = logits.device
        out = torch.empty(len(seqs), dtype=torch.long, device=dev)
        if greedy:
            gi = torch.tensor(greedy, device=dev)
            out[gi] = logits[gi].argmax(dim=-1)
        plain = [i for i, s in enumerate(seqs) if not s.sampling.is_greedy and not _has_filters(s)]
        filtered = [i for i, s in enumerate(seqs) if not s.sampling.is_greedy and _has_filters(s)]
        for rows, with_filters in ((plain, False), (filtered, True)):
            if rows:
                ri = torch.tensor(rows, device=dev)
                out[ri] = self._sample(logits[ri], [seqs[i] for i in rows], with_filters)
        return out.tolist()

    def _sample(self, logits: torch.Tensor, seqs: list[Sequence], with_filters: bool) -> torch.Tensor:
        dev = logits.device
        temps = torch.tensor([s.sampling.temperature for s in seqs], dtype=logits.dtype, device=dev)
        probs = torch.softmax(logits / temps[:, None], dim=-1)
        if with_filters:
            probs, order = probs.sort(dim=-1, descending=True)
            top_k = torch.tensor([min(s.sampling.top_k, self.vocab_size) for s in seqs], device=dev)
            top_p = torch.tensor([s.sampling.top_p for s in seqs], dtype=probs.dtype, device=dev)
            min_p = torch.tensor([s.sampling.min_p for s in seqs], dtype=probs.dtype, device=dev)
            ranks = torch.arange(probs.shape[1], device=dev)[None, :]
            cum = probs.cumsum(dim=-1)
            drop = (ranks >= top_k[:, None]) | ((cum - probs) > top_p[:, None]) | (probs < min_p[:, None] * probs[:, :1])
            drop[:, 0] = False
            probs = probs.masked_fill(drop, 0.0)
        cdf = probs.cumsum(dim=-1)
        # each row's generator lives on the engine's device (see InputProcessor)
        u = torch.stack([torch.rand((), generator=s.generator, dtype=cdf.dtype, device=dev) for s in seqs])
        choice = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).squeeze(1)
        choice = choice.clamp_(max=probs.shape[1] - 1)
        # never pick a zero-probability token through rounding at the top of the CDF
        zero = probs.gather(1, choice[:, None]).squeeze(1) <= 0
        if zero.any():
            choice[zero] = probs[zero].argmax(dim=-1)
        return order.gather(1, choice[:, None]).squeeze(1) if with_filters else choice

    def _apply_bias_and_penalties(self, logits: torch.Tensor, seqs: list[Sequence]) -> None:
        dev = logits.device
        for i, s in enumerate(seqs):
            p = s.sampling
            if p.logit_bias:
                ids = torch.tensor([int(k) for k in p.logit_bias], dtype=torch.long, device=dev)
                bias = torch.tensor(list(p.logit_bias.values()), dtype=logits.dtype, device=dev)
                logits[i].index_add_(0, ids, bias)
        rows = [i for i, s in enumerate(seqs) if s.token_counts is not None]
        if not rows:
            return
        ri = torch.tensor(rows, device=dev)
        counts = torch.stack([seqs[i].token_counts for i in rows]).to(logits.dtype)  # type: ignore[misc]
        sub = logits[ri]
        freq = torch.tensor([seqs[i].sampling.frequency_penalty for i in rows], dtype=logits.dtype, device=dev)[:, None]
        pres = torch.tensor([seqs[i].sampling.presence_penalty for i in rows], dtype=logits.dtype, device=dev)[:, None]
        rep = torch.tensor([seqs[i].sampling.repetition_penalty for i in rows], dtype=logits.dtype, device=dev)[:, None]
        seen = counts > 0
        sub = torch.where(seen, torch.where(sub > 0, sub / rep, sub * rep), sub)
        sub = sub - freq * counts - pres * seen.to(logits.dtype)
        logits[ri] = sub

    def _apply_min_new_tokens(self, logits: torch.Tensor, seqs: list[Sequence]) -> None:
        for i, s in enumerate(seqs):
            p = s.sampling
            if s.num_output_tokens < p.min_new_tokens:
                banned = list(p.stop_token_ids or [])
                if not p.ignore_eos:
                    banned += self.eos_token_ids
                if banned:
                    logits[i, banned] = float("-inf")


def record_logprobs(logits: torch.Tensor, seqs: list[Sequence], tokens: list[int]) -> None:
    """Appends the chosen token's logprob (and the top ones asked for) to each row that wants them."""
    rows = [i for i, s in enumerate(seqs) if s.return_logprob]
    ri = torch.tensor(rows, device=logits.device)
    temps = torch.tensor([seqs[i].sampling.temperature for i in rows], dtype=logits.dtype, device=logits.device)
    logprobs = torch.log_softmax(logits[ri] / temps[:, None], dim=-1).clamp_(min=LOGPROB_FLOOR)
    chosen = torch.tensor([tokens[i] for i in rows], device=logits.device)
    picked = logprobs.gather(1, chosen[:, None]).squeeze(1).tolist()
    k = max(seqs[i].top_logprobs_num for i in rows)
    top_values, top_ids = (logprobs.topk(k, dim=-1) if k else (None, None))
    for j, i in enumerate(rows):
        seq = seqs[i]
        seq.output_logprobs.append((picked[j], tokens[i]))
        if seq.top_logprobs_num and top_values is not None:
            n = seq.top_logprobs_num
            seq.output_top_logprobs.append(list(zip(top_values[j, :n].tolist(), top_ids[j, :n].tolist())))
        else:
            seq.output_top_logprobs.append([])


def _has_filters(seq: Sequence) -> bool:
    p = seq.sampling
    return p.top_k < (1 << 30) or p.top_p < 1.0 or p.min_p > 0.0


def needs_penalties(seq: Sequence) -> bool:
    p = seq.sampling
    return p.frequency_penalty != 0.0 or p.presence_penalty != 0.0 or p.repetition_penalty != 1.0
