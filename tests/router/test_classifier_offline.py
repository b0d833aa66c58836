"""The shipped artifact and the embedding model load with the network cut off, and the
escalating classifier holds its dev accuracy floor (on every fourth dev line, to stay quick;
`macaron router eval --data dev.jsonl` and loadtest/bench_classifier.py measure all of it) and its
floors on the external sets (external.jsonl, external_multiturn.jsonl and external_real_users.jsonl: sources
no split of the routing data reads) and on the written follow-up panel (followup_panel.jsonl)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

# Measured on dev.jsonl with escalation (shipped artifact); see the artifact's report.
DEV_ESCALATED_ACCURACY_FLOOR = 0.90
# Measured on external.jsonl with escalation (shipped artifact G3, routing_data/README.md, external sets): 0.939,
# lowest recall `ui` 0.81 (EvoGenUI-Bench's tool-grounded workspaces read as `agent` or `code`; Ys 0.947, 0.83); on
# external_multiturn.jsonl stays 0.985 (Ys 1.00), switches 0.84 (Ys 0.87; W: the fast path alone 0.76); on the issue's
# kinds, stays whose new turn alone is ambiguous 0.995 (198 lines) and switches whose new turn alone is confident 0.95
# (166; Ys 0.97), held to the goals.
EXTERNAL_ACCURACY_FLOOR = 0.90
EXTERNAL_RECALL_FLOOR = 0.70
EXTERNAL_STAY_FLOOR = 0.95
EXTERNAL_SWITCH_FLOOR = 0.75
EXTERNAL_AMBIGUOUS_STAY_FLOOR = 0.95
EXTERNAL_CONFIDENT_SWITCH_FLOOR = 0.90
# Measured on external_real_users.jsonl (Chatbot Arena's real users as Arena-Hard-Auto v2.0 and v0.1 picked them,
# 1,142 requests labelled by hand: chat 625, code 498, ui 18, agent 1, too few for a recall floor): the shipped
# artifact (G3) 0.886, recall chat 0.89 / code 0.89 (Ys the same); Y 0.883, recall chat 0.89 / code 0.88; W before
# it 0.862, 0.86 / 0.87 (writing in other languages read as `agent`); U 0.841, 0.81 / 0.89 (maths in LaTeX read as
# `code`).
REAL_USERS_ACCURACY_FLOOR = 0.83
REAL_USERS_RECALL_FLOOR = 0.80
# Measured on followup_panel.jsonl (followup_panel.py: 160 vague follow-ups after a real answer, 72 short requests
# for another specialist) with escalation: G3 stays 0.975 (4 "I don't follow" go to `chat` at 0.62-0.64),
# switches 0.917 ("what does git rebase -i do?" read as `chat`, "mock up a mobile checkout screen" as anything but
# `ui`).
PANEL_STAY_FLOOR = 0.95
PANEL_SWITCH_FLOOR = 0.85

SCRIPT = textwrap.dedent(
    """
    import json, socket, sys

    def refuse(*args, **kwargs):
        raise OSError("network disabled by the test")

    socket.socket.connect = refuse
    socket.create_connection = refuse
    socket.getaddrinfo = refuse

    from macaron.router.classifier import ClassifierSettings, SpecialistClassifier
    from macaron.router.classifier.data import load_jsonl
    from macaron.router.classifier.evaluate import evaluate

    clf = SpecialistClassifier.load(ClassifierSettings(preload_embedder=True, embedder_threads=2))
    assert clf.wait_for_encoders(180), "an encoder did not load"
    forced = SpecialistClassifier(clf.artifact, ClassifierSettings(escalation_threshold=1.0))
    forced._embedder = clf.embedder
    decision = forced.classify("I need help with something")
    result = evaluate(clf, load_jsonl(sys.argv[1])[::4], warmup=5)  # a quarter of dev keeps CI fast
    external = evaluate(clf, load_jsonl(sys.argv[2]), warmup=0)
    external_turns = evaluate(clf, load_jsonl(sys.argv[3]), warmup=0)["multiturn"]
    real_users = evaluate(clf, load_jsonl(sys.argv[4]), warmup=0)
    panel = evaluate(clf, load_jsonl(sys.argv[5]), warmup=0)["multiturn"]

    # Micro-batching: 8 concurrent escalations share encoder calls and get their own rows back.
    import threading
    import numpy as np
    texts = [e.text for e in load_jsonl(sys.argv[1])[:8]]
    direct = [clf.embedder.encode([t])[0] for t in texts]
    clf.embedder.clear_cache()  # the evaluation above cached some of them
    before = clf.embedder.batches
    clf.embedder.window_s = 0.05
    got = [None] * len(texts)
    barrier = threading.Barrier(len(texts))
    def one(i):
        barrier.wait()
        got[i] = clf.embedder.encode_batched([texts[i]])[0]
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(texts))]
    [t.start() for t in threads]
    [t.join() for t in threads]
    same = all(float(np.dot(a, b)) > 0.999 for a, b in zip(direct, got))
    calls = clf.embedder.batches - before
    # A conversation's earlier turns come back with every turn: served from the cache, not encoded again.
    hits = clf.embedder.cache_hits
    again = clf.embedder.encode_batched(["a new turn about invoices", *reversed(texts)])
    cached_same = all(float(np.dot(a, b)) > 0.999 for a, b in zip(reversed(direct), again[1:]))
    cache_hit_count, calls_after = clf.embedder.cache_hits - hits, clf.embedder.batches - before
    # Vague follow-ups in a conversation, with the encoder loaded: the follow-up model reads the turn's embedding
    # (the TF-IDF one read "what do you mean?" as a new chat question, and the sessions left for chat).
    histories = {
        "code": ("Write a Python function that merges two sorted lists", "def merge(a, b): ..."),
        "agent": ("Set an alarm for 6:30 tomorrow and text my wife that I'll be late", "Alarm set for 6:30."),
        "ui": ("Build a landing page for my bakery with a hero section and a menu grid", "<section class=hero>...</section>"),
    }
    vague = {}
    for session, (user, answer) in histories.items():
        for turn in ("what do you mean?", "so what should I do?"):
            messages = [{"role": "user", "content": user}, {"role": "assistant", "content": answer},
                        {"role": "user", "content": turn}]
            vague[f"{session}: {turn}"] = clf.classify(messages=messages, session=session).specialist
    # A sure follow-up that the fast path alone reads near a coin flip (test_turns.py): served, it stays.
    signup = [{"role": "user", "content": "Build a signup form with email and password fields and a submit button."},
              {"role": "assistant", "content": "Here it is."}, {"role": "user", "content": "hmm, are you sure?"}]
    vague["ui: hmm, are you sure?"] = clf.classify(messages=signup, session="ui").specialist
    messages = [{"role": "user", "content": histories["code"][0]}, {"role": "assistant", "content": "def merge..."},
                {"role": "user", "content": "Remind me to call the dentist at 3pm on Friday"}]
    switch = clf.classify(messages=messages, session="code").specialist
    print(json.dumps({"escalated": decision.escalated, "dev": result, "external": external,
                      "external_turns": external_turns, "real_users": real_users, "panel": panel, "batched_same": same,
                      "vague": vague, "switch": switch,
                      "encoder_calls": calls, "requests": len(texts), "cached_same": cached_same,
                      "cache_hits": cache_hit_count, "calls_after": calls_after}))
    """
)


def test_artifact_and_embedder_load_offline(routing_data_dir, capsys) -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("HF_HOME", None)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, *(str(routing_data_dir / name) for name in
                                          ("dev.jsonl", "external.jsonl", "external_multiturn.jsonl",
                                           "external_real_users.jsonl", "followup_panel.jsonl"))],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["escalated"] is True
    dev = out["dev"]
    with capsys.disabled():
        print(
            f"\n[classifier] dev (with escalation): accuracy={dev['accuracy']} macro_f1={dev['macro_f1']} "
            f"escalation_rate={dev['escalation_rate']} p99 all={dev['latency_p99_ms']['all']} ms"
        )
    assert dev["accuracy"] >= DEV_ESCALATED_ACCURACY_FLOOR
    external = out["external"]
    with capsys.disabled():
        print(f"[classifier] external (never trained on): accuracy={external['accuracy']} "
              f"macro_f1={external['macro_f1']} escalation_rate={external['escalation_rate']}")
    assert external["accuracy"] >= EXTERNAL_ACCURACY_FLOOR
    assert all(external["per_class"][c]["recall"] >= EXTERNAL_RECALL_FLOOR for c in ("chat", "agent", "code", "ui")), \
        external["per_class"]
    turns = out["external_turns"]
    with capsys.disabled():
        print(f"[classifier] external multi-turn: stay={turns['stay']} (ambiguous {turns.get('stay_ambiguous')}) "
              f"switch={turns['switch']} (confident {turns.get('switch_confident')})")
    assert turns["stay"] >= EXTERNAL_STAY_FLOOR and turns["switch"] >= EXTERNAL_SWITCH_FLOOR, turns
    assert turns["stay_ambiguous"] >= EXTERNAL_AMBIGUOUS_STAY_FLOOR, turns
    assert turns["switch_confident"] >= EXTERNAL_CONFIDENT_SWITCH_FLOOR, turns
    real = out["real_users"]
    with capsys.disabled():
        print(f"[classifier] real users (never trained on): accuracy={real['accuracy']} macro_f1={real['macro_f1']} "
              f"recall chat={real['per_class']['chat']['recall']} code={real['per_class']['code']['recall']}")
    assert real["accuracy"] >= REAL_USERS_ACCURACY_FLOOR, real
    assert all(real["per_class"][c]["recall"] >= REAL_USERS_RECALL_FLOOR for c in ("chat", "code")), real["per_class"]
    panel = out["panel"]
    with capsys.disabled():
        print(f"[classifier] follow-up panel (written): stay={panel['stay']} switch={panel['switch']}")
    assert panel["stay"] >= PANEL_STAY_FLOOR and panel["switch"] >= PANEL_SWITCH_FLOOR, panel
    assert 0.0 < dev["escalation_rate"] < 0.6
    assert out["batched_same"], "a micro-batched request got another request's embedding"
    assert 1 <= out["encoder_calls"] < out["requests"], out
    assert out["cached_same"] and out["cache_hits"] == out["requests"], out
    assert out["calls_after"] == out["encoder_calls"] + 1, out  # only the new turn was encoded
    moved = {turn: got for turn, got in out["vague"].items() if got != turn.split(":")[0]}
    assert not moved, f"vague follow-ups left their session: {moved}"
    assert out["switch"] == "agent", out["switch"]
