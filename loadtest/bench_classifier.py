"""Benchmark of the L0 router's specialist classifier, on one CPU core.

    python loadtest/bench_classifier.py --quick    # under a minute
    python loadtest/bench_classifier.py            # also re-measures source hold-out (minutes)

Accuracy: dev.jsonl with the shipped artifact (escalating as in production). Source hold-out:
mean over held-out source repositories of the escalating classifier's accuracy; --quick reads
it from the artifact's training report (measured by the same code at `macaron router train`),
the full run re-trains every fold. Latency: per decision on this thread, pinned to one core
with torch on one thread; the embedding model is loaded before timing. Human-readable lines
go to stderr; the last line on stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def pin_to_one_core() -> int | None:
    try:
        core = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {core})
        return core
    except (AttributeError, OSError):  # not Linux
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Under a minute: hold-out from the artifact's report.")
    parser.add_argument("--artifact", help="Artifact to measure (default: the shipped one).")
    parser.add_argument("--data-dir", help="Routing data folder (default: the copy shipped in macaron/router/classifier/routing_data).")
    parser.add_argument("--passes", type=int, default=None, help="Timed passes over dev (default: 1 quick, 3 full).")
    args = parser.parse_args(argv)
    core = pin_to_one_core()
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    from macaron.router.classifier import ClassifierSettings, SpecialistClassifier
    from macaron.router.classifier.data import find_data_dir, load_jsonl
    from macaron.router.classifier.evaluate import evaluate

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    data_dir = find_data_dir(args.data_dir)
    dev = load_jsonl(data_dir / "dev.jsonl")
    settings = ClassifierSettings(artifact_path=args.artifact, embedder_threads=1)
    started = time.perf_counter()
    classifier = SpecialistClassifier.load(settings)
    load_s = time.perf_counter() - started
    started = time.perf_counter()
    classifier.embedder.wait()
    embedder_load_s = time.perf_counter() - started
    log(f"artifact load {load_s:.2f} s, embedding model load {embedder_load_s:.1f} s, core {core}")

    result = evaluate(classifier, dev)
    log(f"dev: accuracy {result['accuracy']} (fast path {result['fast_path_accuracy']}), "
        f"macro-F1 {result['macro_f1']}, escalation {result['escalation_rate']}")

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
        "source_holdout_from": holdout_from,
        "fast_p50_ms": result["latency_p50_ms"]["fast"],
        "fast_p99_ms": result["latency_p99_ms"]["fast"],
        "overall_p50_ms": result["latency_p50_ms"]["all"],
        "overall_p99_ms": result["latency_p99_ms"]["all"],
        "escalation_rate": result["escalation_rate"],
        "escalation_threshold": classifier.threshold,
        "decisions_per_s": round(decisions_per_s, 1),
        "fast_decisions_per_s": round(fast_decisions_per_s, 1),
        "cores": 1 if core is not None else None,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
