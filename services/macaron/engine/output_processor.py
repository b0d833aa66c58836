"""After sampling: append the token, advance grammar and text, decide whether the request is done,
and build the cumulative RequestOutput in SGLang's shape.
"""

from __future__ import annotations

import time
from typing import Any

from macaron.engine.protocol import RequestOutput
from macaron.engine.sequence import Sequence


def append_token(seq: Sequence, token: int, eos_token_ids: set[int], context_length: int) -> dict[str, Any] | None:
    """Adds `token` to `seq`; returns the finish reason when the request is done, else None."""
    p = seq.sampling
    seq.token_ids.append(token)
    if seq.first_token_time is None:
        seq.first_token_time = time.monotonic()
    if seq.token_counts is not None:
        seq.token_counts[token] += 1
    if seq.grammar is not None and not seq.grammar.accept(token):
        return {"type": "abort", "message": f"token {token} was rejected by the {seq.grammar.kind} grammar"}
    if (token in eos_token_ids and not p.ignore_eos) or token in (p.stop_token_ids or ()):
        return {"type": "stop", "matched": token}
    if seq.grammar is not None and seq.grammar.is_terminated:
        return {"type": "stop", "matched": token}
    new = seq.detokenizer.update(seq.output_token_ids)
    hit = seq.detokenizer.find_stop(len(new))
    if hit is not None:
        return {"type": "stop", "matched": hit[1], "_index": hit[0]}
    if seq.num_output_tokens >= p.max_new_tokens or len(seq) >= context_length:
        return {"type": "length", "length": seq.num_output_tokens}
    return None


def finalize(seq: Sequence, reason: dict[str, Any]) -> str:
    """The request's final text (stop trimmed unless no_stop_trim); validates constrained output.

    May turn `reason` into an abort when a constrained output fails validation.
    """
    p = seq.sampling
    ids = seq.output_token_ids
    detok = seq.detokenizer
    index = reason.pop("_index", None)
    if reason["type"] == "stop" and isinstance(reason["matched"], int) and not p.no_stop_trim and ids:
        text = detok.final_text(ids[:-1])
    elif index is not None and not p.no_stop_trim:
        text = detok.text[:index]
    else:
        text = detok.final_text(ids)
    if seq.grammar is not None and reason["type"] == "stop" and not isinstance(reason.get("matched"), str):
        # a stop string cuts constrained output on purpose (as on SGLang, which never re-validates)
        error = seq.grammar.validate(text)
        if error is not None:
            reason.clear()
            reason.update({"type": "abort", "message": f"constrained output failed validation: {error}"})
    return text


def make_output(seq: Sequence, text: str | None = None) -> RequestOutput:
    """Cumulative output; while running, text stops before anything that may still become a stop string."""
    finished = seq.finish_reason is not None
    if text is None:
        text = seq.detokenizer.text[: seq.detokenizer.visible_length()]
    seq.last_emitted = seq.num_output_tokens
    return RequestOutput(
        rid=seq.rid,
        output_ids=list(seq.output_token_ids),
        text=text,
        finished=finished,
        finish_reason=seq.finish_reason,
        prompt_tokens=seq.num_prompt_tokens,
        completion_tokens=seq.num_output_tokens,
        cached_tokens=seq.num_cached_tokens,
        e2e_latency=time.monotonic() - seq.arrival_time,
        first_token_latency=None if seq.first_token_time is None else seq.first_token_time - seq.arrival_time,
        output_token_logprobs=list(seq.output_logprobs) if seq.return_logprob else None,
        output_top_logprobs=list(seq.output_top_logprobs) if seq.return_logprob else None,
    )


def should_emit(seq: Sequence) -> bool:
    """Streaming requests get a chunk every stream_interval tokens; others only the final output."""
    if not seq.stream:
        return False
    interval = seq.sampling.stream_interval or 1
    return seq.num_output_tokens - seq.last_emitted >= interval
