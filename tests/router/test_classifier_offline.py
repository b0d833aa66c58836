"""The shipped artifact and the embedding model load with the network cut off, and the
escalating classifier holds its dev accuracy floor (on every fourth dev line, to stay quick;
`macaron router eval --data dev.jsonl` and loadtest/bench_classifier.py measure all of it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

# Measured on dev.jsonl with escalation (shipped artifact); see the artifact's report.
DEV_ESCALATED_ACCURACY_FLOOR = 0.90

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
    assert clf.embedder.wait(120), "embedding model did not load"
    forced = SpecialistClassifier(clf.artifact, ClassifierSettings(escalation_threshold=1.0))
    forced._embedder = clf.embedder
    decision = forced.classify("I need help with something")
    result = evaluate(clf, load_jsonl(sys.argv[1])[::4], warmup=5)  # a quarter of dev keeps CI fast
    print(json.dumps({"escalated": decision.escalated, "dev": result}))
    """
)


def test_artifact_and_embedder_load_offline(routing_data_dir, capsys) -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("HF_HOME", None)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(routing_data_dir / "dev.jsonl")],
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
    assert 0.0 < dev["escalation_rate"] < 0.6
