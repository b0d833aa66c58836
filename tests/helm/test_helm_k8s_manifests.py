"""`k8s/` is exactly a fresh render of the chart with the CPU values, and nothing else."""

from __future__ import annotations

import yaml

from macaron.devtools.generate import generators
from macaron.devtools.k8s_manifests import REPO_ROOT, render_k8s_manifests


def test_k8s_manifests_equal_a_fresh_render() -> None:
    fresh = render_k8s_manifests()
    stale = sorted(p for p, content in fresh.items() if not (REPO_ROOT / p).is_file() or (REPO_ROOT / p).read_bytes() != content)
    assert not stale, f"k8s/ is stale ({stale}): run scripts/generate"
    present = {str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "k8s").iterdir() if p.is_file()}
    assert present == set(fresh), f"files in k8s/ that the chart no longer renders: {sorted(present - set(fresh))}"


def test_k8s_manifests_are_deterministic_and_generated_by_scripts_generate() -> None:
    assert render_k8s_manifests() == render_k8s_manifests()
    assert generators()["k8s-manifests"] is render_k8s_manifests


def test_k8s_manifests_hold_the_cpu_stack() -> None:
    objects = [
        doc
        for path, content in render_k8s_manifests().items()
        if path.endswith(".yaml")
        for doc in yaml.safe_load_all(content)
        if doc
    ]
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert ("Namespace", "macaron") in kinds
    assert ("StatefulSet", "macaron-base") in kinds and ("StatefulSet", "macaron-redis") in kinds
    assert {("Deployment", f"macaron-{n}") for n in ("gateway", "router", "chat", "agent", "code", "ui")} <= kinds
    assert all(o["metadata"].get("namespace") == "macaron" for o in objects if o["kind"] != "Namespace")
    assert "nvidia.com/gpu" not in str(objects)
