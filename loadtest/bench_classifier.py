"""Benchmark of the L0 router's specialist classifier, on one CPU core.

    python loadtest/bench_classifier.py --quick    # under a minute
    python loadtest/bench_classifier.py            # also re-measures source hold-out (minutes)

Accuracy: dev.jsonl with the shipped artifact (escalating as in production). Source hold-out:
mean over held-out source repositories of the escalating classifier's accuracy; --quick reads
it from the artifact's training report (measured by the same code at `macaron router train`),
the full run re-trains every fold. External: external.jsonl, prompts of sources no split of the
routing data reads (all four specialists), and external_multiturn.jsonl, conversations built from them
(a generative-UI benchmark's real revision turns as stays; switches between every pair of specialists);
external_real_users.jsonl, real users' requests (Arena-Hard-Auto v2.0 and v0.1, labelled by hand; a fifth not in English).
followup_panel.jsonl: a written panel of vague follow-ups after a real answer (`panel_stay`) and short requests
for another specialist in a session (`panel_switch`).
Latency: per decision on this thread, pinned to one core with torch on one thread; the embedding model is
loaded before timing. Multi-turn: multiturn_dev.jsonl (stay / continue / switch / tool loop) through the
same classifier, with the session's specialist; `multiturn_switch_confident` is the switches whose new turn
alone the fast path gives its specialist at least 0.8 (the issue's "last turn confidently another domain"),
`multiturn_stay_ambiguous` the stays whose new turn alone gives no other specialist 0.8 (its "last turn ambiguous");
`multiturn_decision_p50_ms` / `_p99_ms` time those decisions as served (escalations and the follow-up
model's turn embeddings included, the encoder cache cleared first). Concurrency: N threads each classify
dev requests with every request escalated (threshold 1), so the figure is the embedding path's throughput,
micro-batched as in production, next to the same load with batching off (one encoder call per request, as
the old lock did); with a second escalation encoder, the same load once more with every request asking it
too. Human-readable lines go to stderr; the last line on stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time


def pin_to_one_core() -> int | None:
    try:
        core = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {core})
        return core
    except (AttributeError, OSError):  # not Linux
        return None


def concurrent_decisions_per_s(classifier, examples, concurrency: int, seconds: float) -> float:
    """Decisions per second with `concurrency` threads classifying (each request escalated)."""
    done = [0] * concurrency
    stop = time.perf_counter() + seconds
    barrier = threading.Barrier(concurrency + 1)

    def worker(k: int) -> None:
        barrier.wait()
        i = k
        while time.perf_counter() < stop:
            e = examples[i % len(examples)]
            classifier.classify(e.text, messages=e.messages, tools=e.tools)
            done[k] += 1
            i += concurrency

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(concurrency)]
    for t in threads:
        t.start()
    started = time.perf_counter()
    barrier.wait()
    for t in threads:
        t.join()
    return sum(done) / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Under a minute: hold-out from the artifact's report.")
    parser.add_argument("--artifact", help="Artifact to measure (default: the shipped one).")
    parser.add_argument("--data-dir", help="Routing data folder (default: the copy shipped in macaron/router/classifier/routing_data).")
    parser.add_argument("--passes", type=int, default=None, help="Timed passes over dev (default: 1 quick, 3 full).")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads for the embedding model; above 1 the process is not pinned to one core "
                             "(micro-batching pays off with cores to spread a batch over).")
    args = parser.parse_args(argv)
    core = pin_to_one_core() if args.threads == 1 else None
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

    from macaron.router.classifier import ClassifierSettings, SpecialistClassifier
    from macaron.router.classifier.data import find_data_dir, load_jsonl
    from macaron.router.classifier.evaluate import evaluate

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    data_dir = find_data_dir(args.data_dir)
    dev = load_jsonl(data_dir / "dev.jsonl")
    settings = ClassifierSettings(artifact_path=args.artifact, embedder_threads=args.threads)
    started = time.perf_counter()
    classifier = SpecialistClassifier.load(settings)
    load_s = time.perf_counter() - started
    started = time.perf_counter()
    classifier.wait_for_encoders()
    embedder_load_s = time.perf_counter() - started
    log(f"artifact load {load_s:.2f} s, embedding model load {embedder_load_s:.1f} s, core {core}")

    result = evaluate(classifier, dev)
    log(f"dev: accuracy {result['accuracy']} (fast path {result['fast_path_accuracy']}), "
        f"macro-F1 {result['macro_f1']}, escalation {result['escalation_rate']}")

    external_path = data_dir / "external.jsonl"  # a source no split reads (external_sources.py)
    external: dict = evaluate(classifier, load_jsonl(external_path)) if external_path.is_file() else {}
    if external:
        log(f"external (never trained on): accuracy {external['accuracy']}, macro-F1 {external['macro_f1']}, "
            f"escalation {external['escalation_rate']}")
    real_users_path = data_dir / "external_real_users.jsonl"  # real users' requests, never trained on
    real_users: dict = evaluate(classifier, load_jsonl(real_users_path)) if real_users_path.is_file() else {}
    if real_users:
        log(f"real users (never trained on): accuracy {real_users['accuracy']}, macro-F1 {real_users['macro_f1']}, "
            f"escalation {real_users['escalation_rate']}")
    external_turns_path = data_dir / "external_multiturn.jsonl"
    external_turns: dict = (evaluate(classifier, load_jsonl(external_turns_path)).get("multiturn", {})
                            if external_turns_path.is_file() else {})
    if external_turns:
        log(f"external multi-turn: stay {external_turns.get('stay')} (ambiguous {external_turns.get('stay_ambiguous')}), "
            f"switch {external_turns.get('switch')} (confident {external_turns.get('switch_confident')})")
    panel_path = data_dir / "followup_panel.jsonl"
    panel: dict = evaluate(classifier, load_jsonl(panel_path)).get("multiturn", {}) if panel_path.is_file() else {}
    if panel:
        log(f"written follow-up panel: stay {panel.get('stay')}, switch {panel.get('switch')}")

    passes = args.passes or (1 if args.quick else 3)
    n = 0
    started = time.perf_counter()
    for _ in range(passes):
        for example in dev:
            classifier.classify(example.text, messages=example.messages, tools=example.tools)
            n += 1
    decisions_per_s = n / (time.perf_counter() - started)
    started = time.perf_counter()
    for example in dev:
        classifier.classify(example.text, messages=example.messages, escalate=False)
    fast_decisions_per_s = len(dev) / (time.perf_counter() - started)

    multiturn_path = data_dir / "multiturn_dev.jsonl"
    multiturn: dict = {}
    multiturn_ms: dict = {}
    if multiturn_path.is_file():
        if classifier.escalation_enabled:
            classifier.embedder.clear_cache()  # a new turn is never cached in production
        mt = evaluate(classifier, load_jsonl(multiturn_path))
        multiturn = mt["multiturn"]
        multiturn_ms = {"p50": mt["latency_p50_ms"]["all"], "p99": mt["latency_p99_ms"]["all"]}
        log(f"multi-turn dev: {multiturn} (fast path {mt['multiturn_fast']}), escalation {mt['escalation_rate']}, "
            f"decision p50 / p99 {multiturn_ms['p50']} / {multiturn_ms['p99']} ms")

    from macaron.router.classifier.decision import SpecialistClassifier as Clf

    seconds = 3.0 if args.quick else 8.0
    concurrency: dict[str, float] = {}
    for label, window_ms, max_batch in (("batched", settings.embed_batch_window_ms, settings.embed_max_batch),
                                        ("unbatched", 0.0, 1)):
        forced = Clf(classifier.artifact, settings.model_copy(update={
            "escalation_threshold": 1.0, "embed_batch_window_ms": window_ms, "embed_max_batch": max_batch,
            "second_encoder": False}))  # MiniLM's path alone; the second encoder's is measured below
        forced.embedder.adopt(classifier.embedder)  # the loaded encoder, shared
        for n in (1, 8, 32):
            if label == "unbatched" and n != 32:
                continue
            rate = concurrent_decisions_per_s(forced, dev, n, seconds)
            concurrency[f"{label}_{n}"] = round(rate, 1)
            log(f"escalated decisions/s, {label}, {n} concurrent: {rate:.1f} ({forced.embedder.batches} encoder calls)")
    if classifier.second_encoder_enabled:  # every request through both encoders (its threshold above 1)
        import dataclasses

        second = dataclasses.replace(classifier.artifact.second, below=1.01)
        both = Clf(dataclasses.replace(classifier.artifact, second=second),
                   settings.model_copy(update={"escalation_threshold": 1.0}))
        both.embedder.adopt(classifier.embedder)
        both.base_embedder.adopt(classifier.base_embedder)
        for n in (1, 32):
            rate = concurrent_decisions_per_s(both, dev, n, seconds)
            concurrency[f"second_{n}"] = round(rate, 1)
            log(f"decisions/s through both encoders, {n} concurrent: {rate:.1f} "
                f"({both.base_embedder.batches} base-model calls)")

    if args.quick:
        holdout = classifier.artifact.report.get("holdout", {})
        holdout_from = "artifact training report"
    else:
        from macaron.router.classifier.train import TrainConfig, train

        log("re-training every source hold-out fold (minutes)")
        holdout = train(data_dir, TrainConfig(), progress=log).report.get("holdout", {})
        holdout_from = "re-measured"
    for name, entry in holdout.get("per_repository", {}).items():
        log(f"  hold-out {name:40s} acc {entry.get('accuracy')} (fast {entry.get('fast_accuracy')}, "
            f"embedding {entry.get('embed_accuracy')}), escalation {entry.get('escalation_rate')}")

    summary = {
        "dev_accuracy": result["accuracy"],
        "dev_fast_accuracy": result["fast_path_accuracy"],
        "dev_macro_f1": result["macro_f1"],
        "source_holdout_accuracy": holdout.get("mean_accuracy"),
        "source_holdout_fast_accuracy": holdout.get("mean_fast_accuracy"),
        "source_holdout_macro_f1": holdout.get("pooled", {}).get("macro_f1"),
        "source_holdout_escalation_rate": holdout.get("escalation_rate"),
        "source_holdout_second_encoder_rate": holdout.get("second_rate"),
        "source_holdout_from": holdout_from,
        "fast_p50_ms": result["latency_p50_ms"]["fast"],
        "fast_p99_ms": result["latency_p99_ms"]["fast"],
        "overall_p50_ms": result["latency_p50_ms"]["all"],
        "overall_p99_ms": result["latency_p99_ms"]["all"],
        "code_recall": holdout.get("pooled", {}).get("per_class", {}).get("code", {}).get("recall"),
        "per_class_holdout": holdout.get("pooled", {}).get("per_class"),
        "escalation_rate": holdout.get("escalation_rate"),
        "dev_code_recall": result["per_class"]["code"]["recall"],
        "external_accuracy": external.get("accuracy"),
        "external_macro_f1": external.get("macro_f1"),
        "external_per_class": external.get("per_class"),
        "real_user_accuracy": real_users.get("accuracy"),
        "real_user_macro_f1": real_users.get("macro_f1"),
        "real_user_escalation_rate": real_users.get("escalation_rate"),
        "external_multiturn_stay": external_turns.get("stay"),
        "external_multiturn_switch": external_turns.get("switch"),
        "external_multiturn_switch_confident": external_turns.get("switch_confident"),
        "external_multiturn_stay_ambiguous": external_turns.get("stay_ambiguous"),
        "panel_stay": panel.get("stay"),
        "panel_switch": panel.get("switch"),
        "dev_escalation_rate": result["escalation_rate"],
        "dev_second_encoder_rate": result["second_encoder_rate"],
        "external_second_encoder_rate": external.get("second_encoder_rate"),
        "multiturn_stay": multiturn.get("stay"),
        "multiturn_continue": multiturn.get("continue"),
        "multiturn_switch": multiturn.get("switch"),
        "multiturn_switch_confident": multiturn.get("switch_confident"),
        "multiturn_stay_ambiguous": multiturn.get("stay_ambiguous"),
        "multiturn_tool_loop": multiturn.get("tool_loop"),
        "multiturn_tool_loop_switches": multiturn.get("tool_loop_switches"),
        "multiturn_decision_p50_ms": multiturn_ms.get("p50"),  # with escalations and follow-up embeddings
        "multiturn_decision_p99_ms": multiturn_ms.get("p99"),
        "multiturn_holdout": classifier.artifact.report.get("multiturn_holdout", {}).get("pooled"),
        "decisions_per_s_1_concurrent": concurrency.get("batched_1"),
        "decisions_per_s_8_concurrent": concurrency.get("batched_8"),
        "decisions_per_s_32_concurrent": concurrency.get("batched_32"),
        "decisions_per_s_32_concurrent_unbatched": concurrency.get("unbatched_32"),
        "second_encoder_decisions_per_s_1_concurrent": concurrency.get("second_1"),
        "second_encoder_decisions_per_s_32_concurrent": concurrency.get("second_32"),
        "escalation_threshold": classifier.threshold,
        "escalation_encoder": "tuned" if classifier.artifact.adapter_path or classifier.artifact.adapter else "frozen",
        "encoder_holdout_same_folds": {
            name: {"combined": entry.get("mean_accuracy"), "encoder_alone": entry.get("mean_embed_accuracy"),
                   "escalation_rate": entry.get("escalation_rate")}
            for name, entry in classifier.artifact.report.get("encoder_holdout", {}).items() if name != "folds"},
        "decisions_per_s": round(decisions_per_s, 1),
        "fast_decisions_per_s": round(fast_decisions_per_s, 1),
        "cores": 1 if core is not None else os.cpu_count(),
        "embedder_threads": args.threads,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
