"""The KubeRay RayService example (`k8s/ray/rayservice.yaml`): valid against the pinned RayService
CRD schema (strict) and the core pod schema, a Serve config that Serve's own schema accepts, and
a Macaron configuration that builds the same application the config names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_checks import supported_kube_versions, validation_errors

from macaron.devtools.k8s_manifests import REPO_ROOT
from macaron.devtools.rayservice import CONFIG_PATH

OLDEST, NEWEST = supported_kube_versions()
MANIFEST = REPO_ROOT / "k8s" / "ray" / "rayservice.yaml"


@pytest.fixture(scope="module")
def objects() -> dict[str, dict[str, Any]]:
    found = {obj["kind"]: obj for obj in yaml.safe_load_all(MANIFEST.read_text()) if obj}
    assert set(found) == {"ConfigMap", "RayService"}
    return found


@pytest.mark.parametrize("version", [OLDEST, NEWEST])
def test_objects_are_valid_in_strict_mode(objects: dict[str, dict[str, Any]], version: str) -> None:
    errors = [error for obj in objects.values() for error in validation_errors(obj, version)]
    assert not errors, "\n".join(errors)


def test_the_crd_schema_refuses_what_the_api_server_would(objects: dict[str, dict[str, Any]]) -> None:
    bad = yaml.safe_load(yaml.safe_dump(objects["RayService"]))
    bad["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["replicaz"] = 2
    bad["spec"]["serveConfigV2"] = 42
    errors = validation_errors(bad, NEWEST)
    assert any("replicaz" in e for e in errors) and any("serveConfigV2" in e for e in errors), errors


def _config_file(objects: dict[str, dict[str, Any]], tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(objects["ConfigMap"]["data"]["config.yaml"])
    return path


def test_serve_config_is_what_serve_accepts_and_matches_the_application(
    objects: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    from ray.serve.schema import ServeDeploySchema

    from macaron.config import load_settings
    from macaron.rayserve.app import build

    serve_config = ServeDeploySchema.model_validate(yaml.safe_load(objects["RayService"]["spec"]["serveConfigV2"]))
    (app,) = serve_config.applications
    assert app.import_path == "macaron.rayserve.app:build" and app.args == {"config": CONFIG_PATH}
    settings = load_settings(_config_file(objects, tmp_path))
    # The engine directory is looked up by application name; the proxy port is the ingress's.
    assert app.name == settings.ray.app_name
    assert serve_config.http_options.port == settings.ray.http_port
    # Every deployment the config tunes is one the application has, with the section's replicas.
    built = build({"config": str(_config_file(objects, tmp_path))})
    names = _deployment_names(built)
    assert {d.name for d in app.deployments} == names - {"EngineDirectory"}
    code = next(d for d in app.deployments if d.name == "Specialist-code")
    assert code.autoscaling_config["max_replicas"] == settings.ray.specialist("code").autoscaling.max_replicas
    engine = next(d for d in app.deployments if d.name == "Engine")
    assert engine.num_replicas == settings.ray.engine.num_replicas


def test_the_builder_refuses_unknown_args() -> None:
    from macaron.rayserve.app import build

    with pytest.raises(ValueError, match="config"):
        build({"confg": "x.yaml"})


def _deployment_names(app: Any) -> set[str]:
    """Every deployment an Application's bind graph reaches (what Serve would deploy)."""
    from ray.serve.deployment import Application

    seen: set[str] = set()

    def visit(value: Any) -> None:
        if isinstance(value, Application):
            bound = value._bound_deployment
            if bound.name not in seen:
                seen.add(bound.name)
                for arg in list(value._bound_deployment.init_args) + list(value._bound_deployment.init_kwargs.values()):
                    visit(arg)
        elif isinstance(value, dict):
            for item in value.values():
                visit(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                visit(item)

    visit(app)
    return seen
