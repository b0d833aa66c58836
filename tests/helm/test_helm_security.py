"""Credentials and TLS in the chart: the engine's key, the internal token, certificates, SGLang's flags."""

from __future__ import annotations

import pytest
from helm_checks import EXAMPLES, GPU_RENDERS, flag_values, named, pod_templates, render_objects

TLS_DIR = "/etc/macaron/tls"


def _containers(objects, component: str) -> list[dict]:
    return [c for t in pod_templates(objects) if t.component == component for c in t.spec["containers"]]


def _secret_env(container: dict) -> dict[str, tuple[str, str]]:
    return {e["name"]: (e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
            for e in container.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})}


def _plain_env(container: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_internal_credentials_come_from_the_secret_to_exactly_who_needs_them(renders, name: str) -> None:
    objects = renders[name]
    token = ("macaron-internal", "internal-token")
    engine_key = ("macaron-internal", "engine-api-key")
    for component in ("router", "specialist"):
        for container in _containers(objects, component):
            secrets = _secret_env(container)
            assert secrets["MACARON_AUTH__INTERNAL_TOKEN"] == token, component
            assert secrets["MACARON_ENGINE__API_KEY"] == engine_key, component  # the judge and generation call the engine
    for container in _containers(objects, "gateway"):  # calls the router with the caller's key, nothing else
        assert not {"MACARON_AUTH__INTERNAL_TOKEN", "MACARON_ENGINE__API_KEY"} & set(_secret_env(container))
    for container in _containers(objects, "base"):
        assert _secret_env(container)["MACARON_ENGINE__API_KEY"] == engine_key
        assert "MACARON_AUTH__INTERNAL_TOKEN" not in _secret_env(container)
        if container["command"][:3] == ["python3", "-m", "sglang.launch_server"]:
            assert flag_values(container["args"], "--api-key") == ["$(MACARON_ENGINE__API_KEY)"]
    assert "internal-token" not in str(named(objects, "ConfigMap", "macaron-config"))  # values never in a ConfigMap


@pytest.mark.parametrize("name", GPU_RENDERS)
def test_sglang_gets_the_flags_the_services_rely_on(renders, name: str) -> None:
    for container in _containers(renders[name], "base"):
        args = container["args"]
        assert "--constrained-json-disable-any-whitespace" in args
        assert "--incremental-streaming-output" in args
        assert int(flag_values(args, "--max-queued-requests")[0]) >= 1


def test_the_chart_refuses_a_release_without_internal_credentials() -> None:
    with pytest.raises(Exception, match="internal"):  # the schema (minLength) and the template both refuse it
        render_objects({"auth": {"internal": {"existingSecret": ""}}})


def test_without_tls_nothing_is_mounted_and_probes_speak_grpc(renders) -> None:
    for template in pod_templates(renders["default"]):
        assert all(v["name"] != "tls" for v in template.spec.get("volumes", []))
        if template.component in ("router", "specialist"):
            assert "grpc" in template.spec["containers"][0]["readinessProbe"]


def test_tls_mounts_the_certificate_secret_and_points_every_hop_at_it(variant_renders) -> None:
    objects = variant_renders["grpc-tls"]
    for template in pod_templates(objects):
        if template.component not in ("gateway", "router", "specialist"):
            continue
        (volume,) = [v for v in template.spec["volumes"] if v["name"] == "tls"]
        assert volume["secret"]["secretName"] == "macaron-grpc-tls"  # a cert-manager Certificate's secretName
        (container,) = template.spec["containers"]
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == "tls"]
        assert mount["mountPath"] == TLS_DIR and mount["readOnly"]
        env = _plain_env(container)
        if template.component == "router":
            assert env["MACARON_ROUTER__TLS__CERT_FILE"] == f"{TLS_DIR}/tls.crt"
            assert env["MACARON_ROUTER__TLS__KEY_FILE"] == f"{TLS_DIR}/tls.key"
            assert env["MACARON_ROUTER__SPECIALIST_TLS__CA_FILE"] == f"{TLS_DIR}/ca.crt"
            assert env["MACARON_ROUTER__SPECIALIST_TLS__CERT_FILE"] == f"{TLS_DIR}/tls.crt"  # mutual
            assert env["MACARON_ROUTER__SPECIALIST_TLS__SERVER_NAME"] == "macaron.internal"
        elif template.component == "specialist":
            assert env["MACARON_SPECIALISTS__TLS__CERT_FILE"] == f"{TLS_DIR}/tls.crt"
            assert env["MACARON_SPECIALISTS__TLS__CLIENT_CA_FILE"] == f"{TLS_DIR}/ca.crt"
        else:
            assert env["MACARON_GATEWAY__ROUTER_TLS"] == "true"
            assert env["MACARON_GATEWAY__ROUTER_CA_FILE"] == f"{TLS_DIR}/ca.crt"
            assert env["MACARON_GATEWAY__ROUTER_SERVER_NAME"] == "macaron.internal"
        if template.component in ("router", "specialist"):  # kubelet gRPC probes cannot speak TLS
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                assert container[probe]["tcpSocket"] == {"port": "grpc"}, probe


def test_tls_settings_load_into_the_services_models(variant_renders) -> None:
    from macaron.config import MacaronSettings

    objects = variant_renders["grpc-tls"]
    (router,) = _containers(objects, "router")
    (specialist, *_) = _containers(objects, "specialist")
    env = {**_plain_env(router), **_plain_env(specialist)}
    router_tls = {k.split("__", 2)[2].lower(): v for k, v in env.items() if k.startswith("MACARON_ROUTER__TLS__")}
    client_tls = {k.split("__", 2)[2].lower(): v for k, v in env.items() if k.startswith("MACARON_ROUTER__SPECIALIST_TLS__")}
    server_tls = {k.split("__", 2)[2].lower(): v for k, v in env.items() if k.startswith("MACARON_SPECIALISTS__TLS__")}
    settings = MacaronSettings(router={"tls": router_tls, "specialist_tls": client_tls}, specialists={"tls": server_tls})
    assert settings.router.tls.enabled and settings.router.specialist_tls.on and settings.specialists.tls.client_ca_file
