"""Multi-turn routing data: conversations of three kinds, built from the single-turn data.

A line is `{"messages", "label", "session", "kind", "source", "license"[, "tools"]}`:
`session` is the specialist that served the conversation so far (None: no session), `label`
the one that should serve the new turn. Kinds:

- `stay`: the new turn is a follow-up that carries no domain of its own ("make it shorter",
  MT-Bench's second turns, BFCL's and SGD's later turns, Web-Bench's next task): label = the
  conversation's specialist; at most 2 later turns of each public conversation;
- `continue`: the new turn is a full request of the same domain: label = the same specialist;
- `switch`: the new turn is a full request (4 words or more) of another domain: label = that domain;
- `tool_loop`: the new turn carries results of tools the assistant called: label = the session's
  specialist, whatever the results read like (the router never switches there).

A share of the `stay`, `continue` and `switch` lines that have a session come again as the new turn
alone (`"history": "not resent"`): a client that keeps its conversation on the server (a session id)
may send only its newest turn, and then the session's specialist is all the router knows of the past.

Requests come from `train.jsonl`/`dev.jsonl` (each split builds from its own rows, so the multi-turn
dev set shares no text with training); real follow-ups from `conversations.jsonl` (public
multi-turn sources, each line with its split, source and license) and a short list of generic
continuations written for this project. `python -m macaron.router.classifier.multiturn_data`
rewrites `multiturn_train.jsonl` and `multiturn_dev.jsonl` (fixed seed); with `--short-switches-only` it
redraws only the short switches appended to `multiturn_train.jsonl`.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from macaron.router.classifier.data import LABELS, SHIPPED_DATA_DIR, Example, load_jsonl

KINDS = ("stay", "continue", "switch", "tool_loop")
WRITTEN_SOURCE = "macaron:written-followups"
# Continuations that name no domain, written for this project (half train, half dev).
WRITTEN_FOLLOWUPS = (
    "make it shorter", "continue", "go on", "can you explain that in more detail?", "try again",
    "that didn't work", "why?", "thanks! one more thing: make it a bit more polished", "and the second one?",
    "do the same for the other case", "perfect, now undo the last change", "can you simplify it?",
    "ok, what next?", "hmm, are you sure?", "please redo it with fewer steps", "nice. now add a short summary at the end",
    "what about the edge cases?", "yes, do that", "no, I meant the previous version", "shorter please",
    "keep going", "again but more formal", "could you double-check that?", "looks good, finish it",
    "can you break that down step by step?", "and if I change it to 10?", "use the other option instead",
    "that's wrong, fix it", "more detail on the last part please", "ok", "great, now make it nicer",
    "explain the first point again", "can you give me an alternative?", "do it", "rewrite it in a friendlier tone",
    "what does that mean?", "now apply it to the rest", "same thing but shorter", "go ahead", "one more time please",
    # a second batch, in other registers (terse, polite, puzzled, corrective, with typos)
    "hm not quite", "can u redo that", "wait, why is that?", "that's not what I asked", "good. next step?",
    "ok but what about the second part", "you missed one", "could you put that in a table?", "expand on point 2",
    "any other way to do this?", "shorter, and drop the intro", "now the opposite case", "fine, keep it",
    "I still don't get it", "what would you change first?", "summarise what we have so far", "and for three of them?",
    "sounds right, proceed", "nope, go back to the earlier one", "is there a faster way?", "add one more example",
    "what did you assume there?", "can you list the steps?", "less formal please", "still the same problem",
    "ok do the next one", "what's the catch?", "give me just the result", "explain it like I'm new to this",
    "repeat the last answer but cleaner", "yes please", "how sure are you about that?", "merge both versions",
    "drop the last item", "thx, anything else I should know?", "and in the other order?", "that helped, now the rest",
    "can you make the second half clearer", "which of those is best?", "let's stick with the first one",
    # a third batch: asking for more, the commonest follow-up of chat logs, which the two above lacked (a bare
    # "tell me more" read as a request, its "tell me" words taught as requests by "tell me about X")
    "tell me more", "tell me more about that", "elaborate on that", "more please", "go into more detail",
    "say more", "what else?", "can you expand on that?", "and then what?", "explain further",
)
# Sources whose requests a client serves through declared functions (SGD's services are schema-described APIs).
TOOL_SOURCES = ("ShishirPatil/gorilla", "hiyouga/LLaMA-Factory:data/glaive",
                "google-research-datasets/dstc8-schema-guided-dialogue")
# A `switch` or `continue` turn is a full request: "Hello" or "what is money" after a code conversation
# names no domain of its own strongly enough to leave it, so such turns are not taught as switches.
MIN_REQUEST_WORDS = 4
# More `switch` lines whose new turn is a short request (`short_switches`), training only (multi-turn dev as before).
SHORT_SWITCHES = 400
SHORT_SWITCH_WORDS = 8


def _has_tools(source: str) -> bool:
    return any(source.startswith(prefix) for prefix in TOOL_SOURCES)


def _tools(names: Sequence[str]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
            for n in names]


def _history(rows: Sequence[Example]) -> list[dict[str, Any]]:
    """User turns of earlier requests, each answered by an (empty) assistant turn."""
    messages: list[dict[str, Any]] = []
    for row in rows:
        messages.append({"role": "user", "content": row.text})
        messages.append({"role": "assistant", "content": ""})
    return messages


def _line(messages, label, session, kind, source, license_, tools=False) -> dict[str, Any]:
    line = {"messages": messages, "label": label, "session": session, "kind": kind, "source": source,
            "license": license_}
    if tools:
        line["tools"] = _tools(["lookup"])
    return line


class _Sampler:
    """The draws every generated conversation shares (its history, session and declared tools), on one random
    stream, so `build` and `short_switches` make their lines the same way."""

    def __init__(self, examples: Sequence[Example], seed: int, no_session_share: float, tools_share: float) -> None:
        self.rng = random.Random(seed)
        self.rows = [e for e in examples if e.text]
        self.by_label: dict[str, list[Example]] = defaultdict(list)
        for e in self.rows:
            self.by_label[e.label].append(e)
        self.no_session_share, self.tools_share = no_session_share, tools_share

    def requests(self, min_words: int, max_words: int | None = None) -> dict[str, list[Example]]:
        """Each label's rows of `min_words` to `max_words` words: new turns that are full requests."""
        out: dict[str, list[Example]] = defaultdict(list)
        for e in self.rows:
            words = len(e.text.split())
            if words >= min_words and (max_words is None or words <= max_words):
                out[e.label].append(e)
        return out

    def history(self, label: str) -> list[Example]:
        return self.rng.sample(self.by_label[label], self.rng.choice((1, 1, 2, 3)))

    def session_for(self, label: str) -> str | None:
        return None if self.rng.random() < self.no_session_share else label

    def client_tools(self, *rows: Example) -> bool:
        # A client declares tools for the whole conversation: always when a turn comes from a
        # tool-calling source, and for a share of the others (IDE agents and assistants declare
        # tools whatever the user asks), so declared tools are evidence, not a verdict.
        return any(_has_tools(e.source) for e in rows) or self.rng.random() < self.tools_share

    def request_line(self, history_label: str, label: str, pool: dict[str, list[Example]], kind: str) -> dict[str, Any]:
        """A conversation of `history_label` whose new turn is a request of `label` drawn from `pool`."""
        hist, last = self.history(history_label), self.rng.choice(pool[label])
        tools = self.client_tools(*hist, last)
        messages = _history(hist) + [{"role": "user", "content": last.text}]
        return _line(messages, label, self.session_for(history_label), kind, last.source,
                     last.extra.get("license", ""), tools)


def build(examples: Sequence[Example], conversations: Sequence[dict[str, Any]], written: Sequence[str],
          *, seed: int, n_switch: int, n_continue: int, n_stay: int, n_tool: int,
          no_session_share: float = 0.2, tools_share: float = 0.3, max_followups: int = 2) -> list[dict[str, Any]]:
    """Conversations of the four kinds (see the module docstring), deterministic for one seed."""
    draw = _Sampler(examples, seed, no_session_share, tools_share)
    rng, rows, history, session_for, client_tools = draw.rng, draw.rows, draw.history, draw.session_for, draw.client_tools
    requests = draw.requests(MIN_REQUEST_WORDS)  # new turns of `switch` and `continue`
    out: list[dict[str, Any]] = []
    for _ in range(n_switch):
        a, b = rng.sample(LABELS, 2)
        out.append(draw.request_line(a, b, requests, "switch"))
    for _ in range(n_continue):
        a = rng.choice(LABELS)
        out.append(draw.request_line(a, a, requests, "continue"))
    for _ in range(n_stay):
        a = rng.choice(LABELS)
        hist = history(a)
        tools = client_tools(*hist)
        messages = _history(hist) + [{"role": "user", "content": rng.choice(written)}]
        out.append(_line(messages, a, session_for(a), "stay", WRITTEN_SOURCE, "written for this project", tools))
    for conv in conversations:  # real follow-ups: later user turns of a public conversation
        turns = conv["conversation"]
        user_at = [i for i, m in enumerate(turns) if m["role"] == "user"]
        later = user_at[1:]
        if len(later) > max_followups:  # long dialogues would otherwise outweigh every other source
            later = sorted(rng.sample(later, max_followups))
        for k in later:
            messages = [_message(m) for m in turns[: k + 1]]
            out.append(_line(messages, conv["label"], session_for(conv["label"]), "stay", conv["source"],
                             conv["license"], bool(conv.get("tools"))))
        for k, m in enumerate(turns):  # a tool result the assistant asked for: the loop is open
            if m["role"] == "tool" and k > 0 and turns[k - 1]["role"] == "tool_call":
                messages = [_message(x) for x in turns[: k + 1]]
                out.append(_line(messages, conv["label"], conv["label"], "tool_loop", conv["source"],
                                 conv["license"], True))
    for i in range(n_tool):
        a = rng.choice(LABELS)
        hist, result = history(a), rng.choice(rows)  # the result may read like any domain
        messages = _history(hist)[:-1] + [
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": f"call_{i}", "type": "function", "function": {"name": "run", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": result.text},
        ]
        out.append(_line(messages, a, a, "tool_loop", result.source, result.extra.get("license", ""), True))
    rng.shuffle(out)
    return out


def with_lone_turns(lines: Sequence[dict[str, Any]], *, seed: int, share: float = 0.25) -> list[dict[str, Any]]:
    """`lines` plus, for `share` of those with a session and a history (tool loops aside: their
    results need the call), a copy holding only the new turn. The lines given keep their order."""
    rng = random.Random(seed)
    out = list(lines)
    for line in lines:
        if line["kind"] == "tool_loop" or line["session"] is None or len(line["messages"]) < 2:
            continue
        if rng.random() < share:
            out.insert(rng.randrange(len(out) + 1), {**line, "messages": line["messages"][-1:], "history": "not resent"})
    return out


def _message(m: dict[str, Any], call_id: str = "call_0") -> dict[str, Any]:
    if m["role"] == "tool_call":
        try:
            call = json.loads(m["content"])
        except json.JSONDecodeError:
            call = {"name": "call", "arguments": {}}
        return {"role": "assistant", "content": "", "tool_calls": [{"id": call_id, "type": "function", "function": {
            "name": str(call.get("name", "call")), "arguments": json.dumps(call.get("arguments", {}))}}]}
    if m["role"] == "tool":
        return {"role": "tool", "tool_call_id": call_id, "content": m["content"]}
    return {"role": m["role"], "content": m["content"]}


def short_switches(examples: Sequence[Example], *, seed: int, n: int, max_words: int = SHORT_SWITCH_WORDS,
                   no_session_share: float = 0.2, tools_share: float = 0.3) -> list[dict[str, Any]]:
    """`switch` lines whose new turn is a short full request (MIN_REQUEST_WORDS to `max_words` words), as `build`
    makes them. Why: among `build`'s lines, new turns of 4 words or fewer were 545 stays and 74 switches (none to
    `ui`), so the conversation decision learned that a short turn stays ("set a timer for 10 minutes" stayed in a
    `code` session, "create a dashboard with charts" in a `code` or `agent` one). Appended after the other lines, so
    those keep their content."""
    draw = _Sampler(examples, seed, no_session_share, tools_share)
    short = draw.requests(MIN_REQUEST_WORDS, max_words)
    out = []
    for _ in range(n):
        a, b = draw.rng.sample(LABELS, 2)
        out.append(draw.request_line(a, b, short, "switch"))
    return out


def write(folder: Path = SHIPPED_DATA_DIR) -> dict[str, int]:
    conversations = [json.loads(line) for line in (folder / "conversations.jsonl").open(encoding="utf-8")]
    counts = {}
    for split, sizes, seed in (("train", (1600, 600, 500, 300), 0), ("dev", (400, 150, 150, 100), 1)):
        written = WRITTEN_FOLLOWUPS[0::2] if split == "train" else WRITTEN_FOLLOWUPS[1::2]
        examples = load_jsonl(folder / f"{split}.jsonl")
        lines = build(examples, [c for c in conversations if c["split"] == split],
                      written, seed=seed, n_switch=sizes[0], n_continue=sizes[1], n_stay=sizes[2], n_tool=sizes[3])
        lines = with_lone_turns(lines, seed=seed + 100)
        if split == "train":
            lines += short_switches(examples, seed=200, n=SHORT_SWITCHES)
        with (folder / f"multiturn_{split}.jsonl").open("w", encoding="utf-8") as handle:
            for line in lines:
                handle.write(json.dumps(line, ensure_ascii=False) + "\n")
        counts[split] = len(lines)
    return counts


def refresh_short_switches(folder: Path = SHIPPED_DATA_DIR) -> dict[str, int]:
    """Redraws only the `short_switches` tail of `multiturn_train.jsonl` from the current `train.jsonl`, keeping
    every line before it. Why: `write` rebuilds every line, so a source added to train.jsonl would replace the
    whole multi-turn set (and every multi-turn figure measured on it) for the sake of its short requests."""
    path = folder / "multiturn_train.jsonl"
    kept = path.read_text(encoding="utf-8").splitlines()[:-SHORT_SWITCHES]
    tail = short_switches(load_jsonl(folder / "train.jsonl"), seed=200, n=SHORT_SWITCHES)
    lines = kept + [json.dumps(line, ensure_ascii=False) for line in tail]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return {"train": len(lines), "short_switches": len(tail)}


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Rewrites multiturn_train.jsonl and multiturn_dev.jsonl.")
    parser.add_argument("--short-switches-only", action="store_true",
                        help="Redraw only the short-switch lines appended to multiturn_train.jsonl "
                             "(after a change to train.jsonl), keeping every other line.")
    args = parser.parse_args(argv)
    print(refresh_short_switches() if args.short_switches_only else write())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
