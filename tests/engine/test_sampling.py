"""Per-row sampling controls through the engine, and the incremental detokenizer on its own."""

from __future__ import annotations

import torch

from macaron.engine import GenerateRequest, SamplingParams
from macaron.engine.detokenizer import IncrementalDetokenizer
from macaron.engine.sampler import Sampler
from macaron.engine.sequence import Sequence

from .helpers import PROMPTS, greedy, run_all


def _one(engine, sampling: SamplingParams, adapter: str | None = None, prompt: str = PROMPTS[0]):
    return run_all(engine, [GenerateRequest(rid="one", prompt=prompt, sampling=sampling, lora_path=adapter)])["one"]


def test_logit_bias_forces_a_token(engine):
    target = engine.tokenizer.encode("a", add_special_tokens=False)[0]
    out = _one(engine, greedy(5, ignore_eos=True, logit_bias={str(target): 10_000.0}))
    assert out.output_ids == [target] * 5


def test_min_new_tokens_masks_eos_until_reached(engine):
    eos = min(engine.eos_token_ids)
    out = _one(engine, greedy(20, min_new_tokens=6, logit_bias={str(eos): 10_000.0}))
    assert len(out.output_ids) == 7 and out.output_ids[-1] == eos and eos not in out.output_ids[:-1]
    assert out.finish_reason == {"type": "stop", "matched": eos}
    out = _one(engine, greedy(8, ignore_eos=True, logit_bias={str(eos): 10_000.0}))
    assert out.output_ids == [eos] * 8 and out.finish_reason["type"] == "length"


def test_penalties_discourage_repeats():
    vocab = 8
    sampler = Sampler(vocab, eos_token_ids={0})

    def row(**kw) -> Sequence:
        params = SamplingParams(temperature=0, max_new_tokens=4, **kw).normalized(max_new_tokens_limit=16, vocab_size=vocab)
        seq = Sequence("r", [1], params, adapter=None, generator=torch.Generator(), detokenizer=IncrementalDetokenizer(None))
        seq.token_counts = torch.zeros(vocab, dtype=torch.int32)
        seq.token_counts[3] = 3  # token 3 was generated three times
        return seq

    logits = torch.tensor([[0, 0, 0, 10.0, 0, 8.0, 0, 0]] * 4)
    rows = [row(), row(repetition_penalty=2.0), row(frequency_penalty=1.0), row(presence_penalty=2.0)]
    assert sampler(logits, rows) == [3, 5, 5, 3]  # 10/2 < 8; 10-3 < 8; 10-2 > 8


def test_top_k_one_and_tiny_top_p_are_greedy(engine):
    g = _one(engine, greedy(10, ignore_eos=True), "agent").output_ids
    assert _one(engine, SamplingParams(temperature=100.0, top_k=1, max_new_tokens=10, ignore_eos=True), "agent").output_ids == g
    assert _one(engine, SamplingParams(temperature=1.0, top_p=1e-6, max_new_tokens=10, ignore_eos=True), "agent").output_ids == g
    assert _one(engine, SamplingParams(temperature=1.0, min_p=1.0, max_new_tokens=10, ignore_eos=True), "agent").output_ids == g


def test_incremental_detokenizer_holds_partial_characters(engine):
    tok = engine.tokenizer
    text = "ok 😀 日本語 é!"
    ids = tok.encode(text, add_special_tokens=False)
    detok = IncrementalDetokenizer(tok)
    seen = []
    for i in range(1, len(ids) + 1):
        detok.update(ids[:i])
        seen.append(detok.text)
        assert "\ufffd" not in detok.text
        assert text.startswith(detok.text)
    assert seen[-1] == text


def test_stop_string_hold_back():
    class Tok:
        def decode(self, ids, skip_special_tokens=True):
            return "".join(chr(i) for i in ids)

    detok = IncrementalDetokenizer(Tok(), stop=["END"])
    ids = [ord(c) for c in "abcEN"]
    for i in range(1, len(ids) + 1):
        detok.update(ids[:i])
    assert detok.text == "abcEN" and detok.visible_length() == 3  # "EN" may become "END"
    ids.append(ord("D"))
    new = detok.update(ids)
    assert detok.find_stop(len(new)) == (3, "END")


def test_logprobs_are_the_sampled_distribution_after_penalty_mask_and_temperature():
    """Each row's logprob is log_softmax((logits after bias/penalties) / T), before top-k/top-p truncation."""
    vocab = 6
    sampler = Sampler(vocab, eos_token_ids={0})
    logits = torch.tensor([[1.0, 2.0, 3.0, 0.5, -1.0, 0.0]] * 3)

    def row(top: int, **kw) -> Sequence:
        params = SamplingParams(max_new_tokens=4, **kw).normalized(max_new_tokens_limit=16, vocab_size=vocab)
        return Sequence("r", [1], params, adapter=None, generator=torch.Generator().manual_seed(1),
                        detokenizer=IncrementalDetokenizer(None), return_logprob=True, top_logprobs_num=top)

    rows = [row(2, temperature=0), row(0, temperature=0.5, top_k=2), row(6, temperature=0, logit_bias={"4": 100.0})]
    tokens = sampler(logits.clone(), rows)
    expected = [torch.log_softmax(logits[0], -1), torch.log_softmax(logits[1] / 0.5, -1),
                torch.log_softmax(logits[2] + torch.tensor([0, 0, 0, 0, 100.0, 0]), -1).clamp(min=-9999.0)]
    assert tokens[0] == 2 and tokens[2] == 4 and tokens[1] in (1, 2)  # top_k=2 never draws outside the two best
    for seq, token, exp in zip(rows, tokens, expected):
        (logprob, recorded), = seq.output_logprobs
        assert recorded == token and abs(logprob - float(exp[token])) < 1e-5
    assert [t for _, t in rows[0].output_top_logprobs[0]] == [2, 1]
    assert rows[1].output_top_logprobs == [[]]
    assert len(rows[2].output_top_logprobs[0]) == 6 and rows[2].output_top_logprobs[0][-1][0] >= -9999.0
