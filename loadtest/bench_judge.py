"""Does the judge pay? The L0 chat adapter against the classifier's top choice, on the cases where
the router would ask it (classifier confidence below a judge threshold, 0.5 by default).

    python loadtest/bench_judge.py            # about 10 min on a busy 2-core machine
    python loadtest/bench_judge.py --cases 60 # shorter

One run starts one embedded engine (`macaron engine`, SmolLM2 and its four adapters by default)
on loopback and asks it through the router's own `Judge` (the chat adapter, the regex of the
four names, greedy), twice per case, interleaved: with the newest user turn alone
(`history_turns=0`, the judge before this benchmark) and with the earlier user turns too.

Cases, both from data the deciding models never saw:
1. single turns of the source hold-out: for six training repositories (those with the most unsure rows), the fast and embedding
   heads are fitted on the other repositories (as `macaron router train` does), and a row whose
   escalated probability stays below the judge threshold is a case;
2. conversations of multiturn_dev.jsonl without a session (a client that sends its history but
   no session id), where the shipped classifier is unsure.
Human-readable lines go to stderr; the last line on stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


HOLD_OUT = ("ShishirPatil/gorilla", "openai/grade-school-math", "clinc/oos-eval", "InternLM/JanusCoder",
            "chatterbot-corpus", "eg")  # the repositories with the most unsure hold-out rows


def holdout_cases(artifact, threshold: float, per_repo: int, rng: random.Random,
                  only: tuple[str, ...] = HOLD_OUT) -> list[dict]:
    """Unsure single turns of the source hold-out of the repositories in `only`, up to `per_repo` each."""
    from macaron.router.classifier import holdout
    from macaron.router.classifier.data import LABELS, find_data_dir, load_jsonl
    from macaron.router.classifier.embeddings_cache import cached_embed
    from macaron.router.classifier.features import analyze
    from macaron.router.classifier.model import combine, softmax
    from macaron.router.classifier.train import TrainConfig, training_text

    train = load_jsonl(find_data_dir(None) / "train.jsonl")
    config = TrainConfig()
    texts = [training_text(e, config.max_chars) for e in train]
    y = np.array([LABELS.index(e.label) for e in train])
    repos = np.array([e.repository for e in train])
    vectors = cached_embed(texts)
    oof = holdout.out_of_fold([analyze(t) for t in texts], vectors, y, repos, config, only=only, progress=log)
    p_fast = softmax(oof.fast_logits / artifact.fast.temperature)
    p_embed = softmax(oof.embed_logits / artifact.embedding.temperature)
    escalate = p_fast.max(1) < artifact.escalation_threshold
    final = np.where(escalate[:, None], combine(p_fast, p_embed, artifact.fast_weight_when_escalated), p_fast)
    unsure = np.where(final.max(1) < threshold)[0]
    log(f"source hold-out: {len(unsure)} of {len(oof.y)} rows below the judge threshold {threshold}")
    by_repo: dict[str, list[int]] = defaultdict(list)
    for i in unsure:
        by_repo[str(oof.groups[i])].append(int(i))
    held_texts = [texts[i] for i in np.where(np.isin(repos, list(only)))[0]]
    cases = []
    for name in sorted(by_repo):
        rows = by_repo[name]
        rng.shuffle(rows)
        for i in rows[:per_repo]:
            cases.append({"kind": "holdout", "group": name, "messages": [{"role": "user", "content": held_texts[i]}],
                          "tools": None, "label": LABELS[oof.y[i]], "classifier": LABELS[int(final[i].argmax())]})
    return cases


def multiturn_cases(classifier, threshold: float, limit: int, rng: random.Random) -> list[dict]:
    """Unsure conversations of multiturn_dev.jsonl, classified without a session."""
    from macaron.router.classifier.data import find_data_dir, load_jsonl

    rows = [e for e in load_jsonl(find_data_dir(None) / "multiturn_dev.jsonl")
            if e.messages and e.extra.get("kind") != "tool_loop"]
    cases = []
    for e in rows:
        d = classifier.classify(e.text, messages=e.messages, tools=e.tools)
        if d.confidence < threshold:
            cases.append({"kind": "multiturn", "group": str(e.extra.get("kind")), "messages": e.messages, "tools": e.tools,
                          "label": e.label, "classifier": d.specialist})
    log(f"multi-turn dev: {len(cases)} of {len(rows)} conversations below the judge threshold {threshold}")
    rng.shuffle(cases)
    return cases[:limit]


def chat_request(case: dict):
    from macaron.prompting.messages import ChatRequest, Message, ToolSpec

    messages = tuple(Message(role=m["role"], content=m.get("content") or "") for m in case["messages"]
                     if m.get("role") in ("system", "user", "assistant"))
    tools = tuple(ToolSpec(name=(t.get("function") or t).get("name", "tool")) for t in case["tools"] or [])
    return ChatRequest(messages=messages, tools=tools)


async def ask_all(cases: list[dict], judges: dict, url: str, deadline_s: float) -> None:
    for k, case in enumerate(cases, 1):
        chat = chat_request(case)
        for name, judge in judges.items():
            started = time.perf_counter()
            answer, why = await judge.ask(chat, [url])
            case[name] = answer
            case[name + "_ms"] = (time.perf_counter() - started) * 1000.0
            case[name + "_why"] = why
        if k % 20 == 0:
            log(f"  judged {k}/{len(cases)}")
        if time.monotonic() > deadline_s:
            log(f"  time limit: stopped after {k} cases")
            del cases[k:]
            return


def score(cases: list[dict], names: list[str]) -> dict:
    out: dict = {"n": len(cases)}
    if not cases:
        return out
    out["classifier_accuracy"] = round(float(np.mean([c["classifier"] == c["label"] for c in cases])), 4)
    for name in names:
        answered = [c for c in cases if c.get(name)]
        out[f"{name}_accuracy"] = round(float(np.mean([c.get(name) == c["label"] for c in cases])), 4)
        out[f"{name}_answered"] = round(len(answered) / len(cases), 4)
        lat = sorted(c[name + "_ms"] for c in cases)
        out[f"{name}_p50_ms"] = round(lat[len(lat) // 2], 1)
        counts: dict[str, int] = defaultdict(int)
        for c in answered:
            counts[c[name]] += 1
        out[f"{name}_answers"] = dict(sorted(counts.items()))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="Built-in model of the engine (default smollm2, the real one).")
    parser.add_argument("--cases", type=int, default=240, help="Most cases in all (default 240).")
    parser.add_argument("--threshold", type=float, default=0.5,
                        help="Classifier confidence under which a case is judged (default 0.5; the router's "
                             "router.judge_threshold is 0, off, by default, because of what this measures).")
    parser.add_argument("--timeout", type=float, default=5.0,
                        help="Judge deadline per call in seconds (default 5: this measures answers, not deadlines).")
    parser.add_argument("--seconds", type=float, default=900.0, help="Stop asking after this long (default 900).")
    args = parser.parse_args(argv)

    from transformers import AutoTokenizer

    from macaron.assets.builtin import ensure_builtin_model
    from macaron.router.classifier import ClassifierSettings, SpecialistClassifier
    from macaron.router.judge import Judge

    threshold = args.threshold
    rng = random.Random(0)
    classifier = SpecialistClassifier.load(ClassifierSettings())
    classifier.wait_for_encoders()
    multi = multiturn_cases(classifier, threshold, args.cases // 3, rng)
    single = holdout_cases(classifier.artifact, threshold, max(1, (args.cases - len(multi)) // len(HOLD_OUT)), rng)
    cases = single + multi
    log(f"{len(single)} single-turn and {len(multi)} multi-turn cases")

    assets = ensure_builtin_model(args.model, progress=False)
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="bench-judge-"))
    engine_log = open(workdir / "engine.log", "wb")  # noqa: SIM115 - closed below
    lora = [f"{n}={p}" for n, p in assets.adapters.items()]
    proc = subprocess.Popen(
        [sys.executable, "-m", "macaron.cli", "engine", "--host", "127.0.0.1", "--port", str(port),
         "--model-path", str(assets.model_dir), "--log-level", "warning", "--lora-paths", *lora],
        stdout=engine_log, stderr=subprocess.STDOUT, start_new_session=True, cwd=str(REPO),
        env={**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"engine exited: {(workdir / 'engine.log').read_text()[-2000:]}")
            try:
                if httpx.get(url + "/health", timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("engine did not answer /health in 300 s")
            time.sleep(0.5)
        tokenizer = AutoTokenizer.from_pretrained(str(assets.model_dir))
        judges = {f"judge_history_{h}": Judge(tokenizer, "chat", timeout_s=args.timeout, max_chars=1500, history_turns=h)
                  for h in (0, 2)}

        async def run() -> None:
            try:
                await ask_all(cases, judges, url, time.monotonic() + args.seconds)
            finally:
                for judge in judges.values():
                    await judge.aclose()

        asyncio.run(run())
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        engine_log.close()

    names = list(judges)
    result = {"model": args.model, "judge_threshold": threshold,
              "single_turn_holdout": score([c for c in cases if c["kind"] == "holdout"], names),
              "multiturn_dev": score([c for c in cases if c["kind"] == "multiturn"], names),
              "all": score(cases, names)}
    by_group: dict[str, dict] = {}
    for group in sorted({c["group"] for c in cases}):
        part = [c for c in cases if c["group"] == group]
        by_group[group] = {k: v for k, v in score(part, names).items() if not k.endswith(("_answers", "_ms"))}
    for key in ("single_turn_holdout", "multiturn_dev", "all"):
        log(f"{key}: {result[key]}")
    for group, entry in by_group.items():
        log(f"  {group:40s} {entry}")
    result["by_group"] = by_group
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
