"""The chart renders, lints, and every object it renders is valid for the oldest and newest
Kubernetes releases it supports (strict: unknown fields are errors); custom resources are
valid against their pinned CRD schemas."""

from __future__ import annotations

import copy

import helm_python as helm
import kubernetes_validate
import pytest
from helm_checks import (
    CRD_SCHEMA_DIR,
    EXAMPLES,
    VARIANTS,
    by_kind,
    example_values,
    supported_kube_versions,
    validation_errors,
)

from macaron.devtools.k8s_manifests import CHART_DIR

OLDEST, NEWEST = supported_kube_versions()


def test_supported_range_is_what_kubernetes_validate_ships() -> None:
    assert (OLDEST, NEWEST) == ("1.27", "1.37")


@pytest.mark.parametrize("name", sorted(EXAMPLES))
@pytest.mark.parametrize("version", [OLDEST, NEWEST])
def test_every_object_is_valid_in_strict_mode(renders, name: str, version: str) -> None:
    objects = renders[name]
    assert objects
    errors = [error for obj in objects for error in validation_errors(obj, version)]
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("name", sorted(VARIANTS))
@pytest.mark.parametrize("version", [OLDEST, NEWEST])
def test_variants_are_valid_in_strict_mode(variant_renders, name: str, version: str) -> None:
    errors = [error for obj in variant_renders[name] for error in validation_errors(obj, version)]
    assert not errors, "\n".join(errors)


def test_the_renders_cover_every_kind_the_chart_can_render(renders, variant_renders) -> None:
    kinds = {obj["kind"] for objects in [*renders.values(), *variant_renders.values()] for obj in objects}
    assert kinds == {
        "ConfigMap", "Deployment", "HorizontalPodAutoscaler", "Ingress", "LeaderWorkerSet", "NetworkPolicy",
        "PodDisruptionBudget", "Role", "RoleBinding", "Secret", "Service", "ServiceAccount", "ServiceMonitor",
        "StatefulSet",
    }


def test_the_cached_validator_agrees_with_kubernetes_validate(renders) -> None:
    deployment = by_kind(renders["default"], "Deployment")[0]
    for version in (OLDEST, NEWEST):
        kubernetes_validate.validate(deployment, f"{version}.0", strict=True)
        assert validation_errors(deployment, version) == []
    broken = copy.deepcopy(deployment)
    broken["spec"]["template"]["spec"]["containers"][0]["livenessProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, f"{NEWEST}.0", strict=True)
    assert validation_errors(broken, NEWEST)


def test_custom_resources_are_checked_strictly_against_their_crds(renders) -> None:
    lws = by_kind(renders["venti"], "LeaderWorkerSet")[0]
    assert validation_errors(lws, NEWEST) == []
    unknown = copy.deepcopy(lws)
    unknown["spec"]["leaderWorkerTemplate"]["groupSize"] = 2
    assert any("groupSize" in e for e in validation_errors(unknown, NEWEST))
    wrong = copy.deepcopy(lws)
    wrong["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "Always"
    assert validation_errors(wrong, NEWEST)
    monitor = by_kind(renders["venti"], "ServiceMonitor")[0]
    assert validation_errors(monitor, NEWEST) == []
    monitor = copy.deepcopy(monitor)
    monitor["spec"]["endpoints"][0]["scrapeInterval"] = "30s"
    assert validation_errors(monitor, NEWEST)


def test_pinned_crd_schemas_are_documented() -> None:
    readme = (CRD_SCHEMA_DIR / "README.md").read_text()
    for path in CRD_SCHEMA_DIR.glob("*.json"):
        assert path.name in readme


@pytest.mark.parametrize("name", sorted(EXAMPLES))
@pytest.mark.parametrize("version", [OLDEST, NEWEST])
def test_lint_is_clean(name: str, version: str) -> None:
    report = helm.lint(CHART_DIR, example_values(name), strict=True, namespace="macaron", kube_version=f"v{version}.0")
    problems = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
    assert not problems, problems


def test_lint_reports_values_the_schema_refuses() -> None:
    report = helm.lint(CHART_DIR, {"base": {"engine": "vllm"}}, strict=True, kube_version=f"v{NEWEST}.0")
    assert any(m["severity"] == 3 for m in report["messages"]) or report["errors"]


@pytest.mark.parametrize(
    "values, message",
    [
        ({"base": {"engine": "vllm"}}, "/base/engine"),
        ({"specialists": {"math": {"port": 50065}}}, "/specialists/math"),
        ({"gatway": {}}, "gatway"),
        ({"router": {"discovery": "consul"}}, "/router/discovery"),
        ({"base": {"sglang": {"memFractionStatic": 1.5}}}, "memFractionStatic"),
    ],
)
def test_values_schema_refuses_mistakes(values, message: str) -> None:
    from macaron.devtools.k8s_manifests import render_chart

    with pytest.raises(helm.HelmValuesError, match=message):
        render_chart(values)


@pytest.mark.parametrize(
    "values, message",
    [
        ({"base": {"nodes": 2, "gpu": {"perNode": 8}, "sglang": {"tensorParallelSize": 8}}}, "tensorParallelSize"),
        ({"base": {"engine": "embedded", "nodes": 2}}, "one node"),
        ({"model": {"volume": None}}, "model.volume"),
        ({"redis": {"enabled": False}}, "redis.external"),
        ({"auth": {"existingSecret": ""}}, "API keys"),
        ({"base": {"sglang": {"maxLorasPerBatch": 9}}}, "maxLoadedLoras"),
    ],
)
def test_chart_refuses_inconsistent_values(values, message: str) -> None:
    from macaron.devtools.k8s_manifests import render_chart

    with pytest.raises(helm.HelmRenderError, match=message):
        render_chart(values)
