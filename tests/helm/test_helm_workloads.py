"""What an operator checks on first read: the SGLang command line, probes and resources on every
container, GPU scheduling, graceful rollout, minimal RBAC and privileges, headless Services."""

from __future__ import annotations

import json
import os

import helm_python as helm
import pytest
import yaml
from helm_checks import (
    EXAMPLES,
    GPU_RENDERS,
    NAMESPACE,
    by_kind,
    example_values,
    flag_values,
    named,
    pod_templates,
    render_objects,
)

from macaron.devtools.k8s_manifests import CHART_DIR

SPECIALISTS = {"chat", "agent", "code", "ui"}
DRAIN_GRACE = 30


def _engine(template) -> dict:
    return next(c for c in template.spec["containers"] if c["name"] == "engine")


def _base_templates(objects) -> list:
    return [t for t in pod_templates(objects) if t.component == "base"]


def _config(objects) -> dict:
    return yaml.safe_load(named(objects, "ConfigMap", "macaron-config")["data"]["config.yaml"])


def _env(objects, deployment: str) -> dict[str, str]:
    (container,) = named(objects, "Deployment", deployment)["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}


# --- the base group -----------------------------------------------------------------------


@pytest.mark.parametrize("name", GPU_RENDERS)
def test_sglang_serves_every_adapter_with_room_for_later_versions(renders, name: str) -> None:
    values = example_values(name) or {}
    for template in _base_templates(renders[name]):
        engine = _engine(template)
        assert engine["command"] == ["python3", "-m", "sglang.launch_server"]
        args = engine["args"]
        assert "--enable-lora" in args
        lora_paths = flag_values(args, "--lora-paths")
        names = {entry.split("=", 1)[0].split("@", 1)[0] for entry in lora_paths}
        assert names == SPECIALISTS, lora_paths
        assert all(entry.split("=", 1)[1].startswith("/adapters/") for entry in lora_paths)
        for flag in ("--max-loras-per-batch", "--max-lora-rank", "--max-loaded-loras"):
            assert int(flag_values(args, flag)[0]) >= 1, flag
        assert int(flag_values(args, "--max-loras-per-batch")[0]) >= len(SPECIALISTS)
        assert flag_values(args, "--lora-target-modules") == ["q_proj", "k_proj", "v_proj", "o_proj"]
        assert "--disable-radix-cache" not in args  # radix (prefix) cache stays on
        assert flag_values(args, "--model-path") == ["/models/base"]
        assert flag_values(args, "--port") == ["30000"]
        gpus = int(engine["resources"]["limits"]["nvidia.com/gpu"])
        assert engine["resources"]["requests"]["nvidia.com/gpu"] == engine["resources"]["limits"]["nvidia.com/gpu"]
        nodes = values.get("base", {}).get("nodes", 1)
        assert int(flag_values(args, "--tp-size")[0]) == gpus * nodes


def test_a_base_too_large_for_one_node_is_a_leader_worker_set(renders) -> None:
    objects = renders["venti"]
    assert not [s for s in by_kind(objects, "StatefulSet") if s["metadata"]["name"] == "macaron-base"]
    lws = named(objects, "LeaderWorkerSet", "macaron-base")
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert lws["spec"]["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
    for template in _base_templates(objects):
        args = _engine(template)["args"]
        assert flag_values(args, "--tp-size") == ["16"]
        assert flag_values(args, "--nnodes") == ["2"]
        assert flag_values(args, "--node-rank") == ["$(LWS_WORKER_INDEX)"]
        assert flag_values(args, "--dist-init-addr") == ["$(LWS_LEADER_ADDRESS):20000"]
        assert _engine(template)["resources"]["limits"]["nvidia.com/gpu"] == 8
    # The engine Service selects leaders only: rank 0 is the one that serves HTTP.
    service = named(objects, "Service", "macaron-engine")
    leader, worker = (t for t in _base_templates(objects) if t.role in ("leader", "worker"))
    selector = service["spec"]["selector"]
    assert all(leader.labels.get(k) == v for k, v in selector.items())
    assert not all(worker.labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("name", ["default", "tall", "cpu"])
def test_a_base_that_fits_one_node_is_a_stateful_set(renders, name: str) -> None:
    objects = renders[name]
    assert not by_kind(objects, "LeaderWorkerSet")
    base = named(objects, "StatefulSet", "macaron-base")
    assert base["spec"]["serviceName"] == "macaron-engine"
    assert named(objects, "Service", "macaron-engine")["spec"]["clusterIP"] == "None"


@pytest.mark.parametrize("name", GPU_RENDERS)
def test_base_pods_are_scheduled_on_gpus_with_model_adapters_and_shm(renders, name: str) -> None:
    for template in _base_templates(renders[name]):
        spec = template.spec
        assert any(t.get("key") == "nvidia.com/gpu" for t in spec["tolerations"])
        if name != "default":
            assert spec["nodeSelector"]
        mounts = {m["name"]: m for m in _engine(template)["volumeMounts"]}
        assert mounts["model"]["mountPath"] == "/models/base" and mounts["model"]["readOnly"]
        assert mounts["adapters"]["mountPath"] == "/adapters" and mounts["adapters"]["readOnly"]
        assert mounts["dshm"]["mountPath"] == "/dev/shm"
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"


@pytest.mark.parametrize("name", GPU_RENDERS)
def test_base_probes_budget_a_long_load_and_keep_liveness_cheap(renders, name: str) -> None:
    for template in _base_templates(renders[name]):
        engine = _engine(template)
        startup = engine["startupProbe"]
        assert startup["periodSeconds"] * startup["failureThreshold"] >= 1200  # 20 min
        assert engine["livenessProbe"]["httpGet"]["path"] == "/health"
        env = {e["name"]: e.get("value") for e in engine["env"]}
        # SGLang 0.5.23 runs a generation on /health unless this is false.
        assert env["SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"] == "false"
        if template.role != "worker":  # ranks > 0 serve only a stub /health
            assert engine["readinessProbe"]["httpGet"]["path"] == "/health_generate"
            assert engine["readinessProbe"]["timeoutSeconds"] > 20  # SGLang waits up to 20 s
    if name == "venti":
        startup = _engine(_base_templates(renders[name])[0])["startupProbe"]
        assert startup["periodSeconds"] * startup["failureThreshold"] >= 3600


def test_configuration_or_chart_upgrades_do_not_reload_a_gpu_base_group(renders) -> None:
    for name in GPU_RENDERS:
        for template in _base_templates(renders[name]):
            assert "checksum/config" not in template.template["metadata"].get("annotations", {})
            assert not {"helm.sh/chart", "app.kubernetes.io/version"} & set(template.labels)
    # Macaron pods do restart when their configuration changes.
    for template in pod_templates(renders["default"]):
        if template.component in ("gateway", "router", "specialist"):
            assert "checksum/config" in template.template["metadata"]["annotations"]


def test_cpu_mode_runs_the_embedded_engine_without_gpus(renders) -> None:
    objects = renders["cpu"]
    (template,) = _base_templates(objects)
    engine = _engine(template)
    assert engine["command"] == ["macaron"]
    assert engine["args"][:5] == ["engine", "--host", "0.0.0.0", "--port", "30000"]
    assert "--model-path" not in engine["args"]  # the image's tiny model
    assert "nvidia.com/gpu" not in str(engine["resources"])
    assert engine["readinessProbe"]["httpGet"]["path"] == "/health_generate"
    assert "tolerations" not in template.spec
    assert all(v["name"] not in ("model", "adapters") for v in template.spec["volumes"])


# --- every container ----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_container_has_resources_and_probes(renders, name: str) -> None:
    templates = pod_templates(renders[name])
    assert {t.component for t in templates} >= {"gateway", "router", "specialist", "base"}
    for template in templates:
        for container in template.spec["containers"]:
            where = f"{template.owner}/{template.role}/{container['name']}"
            resources = container.get("resources", {})
            assert resources.get("requests", {}).get("cpu") and resources.get("requests", {}).get("memory"), where
            assert resources.get("limits", {}).get("memory"), where
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                assert probe in container, f"{where} has no {probe}"
        for container in template.spec.get("initContainers", []):
            assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_images_are_pinned(renders, name: str) -> None:
    for template in pod_templates(renders[name]):
        for container in template.spec["containers"] + template.spec.get("initContainers", []):
            repository, _, tag = container["image"].rpartition(":")
            assert repository and tag and tag != "latest", container["image"]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_grpc_services_report_health_through_grpc_probes(renders, name: str) -> None:
    for template in pod_templates(renders[name]):
        if template.component in ("router", "specialist"):
            (container,) = template.spec["containers"]
            grpc_port = next(p["containerPort"] for p in container["ports"] if p["name"] == "grpc")
            metrics_port = next(p["containerPort"] for p in container["ports"] if p["name"] == "metrics")
            assert metrics_port == grpc_port + 1000
            assert container["readinessProbe"]["grpc"]["port"] == grpc_port
            assert container["startupProbe"]["grpc"]["port"] == grpc_port


# --- graceful rollout ---------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_pods_drain_in_flight_streams_before_they_are_killed(renders, name: str) -> None:
    for template in pod_templates(renders[name]):
        if template.component == "redis":
            continue
        (container,) = template.spec["containers"]
        command = container["lifecycle"]["preStop"]["exec"]["command"]
        assert command[0] == "sleep"
        pre_stop = int(command[1])
        assert pre_stop >= 5, template.owner
        assert template.spec["terminationGracePeriodSeconds"] >= pre_stop + DRAIN_GRACE + 10, template.owner
    for deployment in by_kind(renders[name], "Deployment"):
        assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


@pytest.mark.parametrize("name", ["default", "venti", "tall"])
def test_gateway_router_and_specialists_have_disruption_budgets(renders, name: str) -> None:
    budgets = {p["metadata"]["name"] for p in by_kind(renders[name], "PodDisruptionBudget")}
    assert budgets >= {"macaron-gateway", "macaron-router", "macaron-base"} | {f"macaron-{s}" for s in SPECIALISTS}


# --- specialists --------------------------------------------------------------------------


def test_one_deployment_service_and_autoscaler_per_specialist(renders) -> None:
    objects = renders["default"]
    profiles = _config(objects)["specialists"]
    for key, port in {"chat": 50061, "agent": 50062, "code": 50063, "ui": 50064}.items():
        deployment = named(objects, "Deployment", f"macaron-{key}")
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["args"] == ["specialist", "--name", key, "--host", "0.0.0.0", "--port", str(port)]
        assert profiles[key] == {"adapter": key, "adapter_version": "v1", "port": port}
        assert named(objects, "Service", f"macaron-{key}")["spec"]["clusterIP"] == "None"
        hpa = named(objects, "HorizontalPodAutoscaler", f"macaron-{key}")
        assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": f"macaron-{key}"}
        assert "replicas" not in deployment["spec"]  # the HPA owns it


def test_specialists_follow_the_values_entries() -> None:
    objects = render_objects(
        {"specialists": {"code": {"adapter": {"version": "v3"}, "replicas": 5, "autoscaling": {"enabled": False}}, "ui": {"enabled": False}}}
    )
    names = {o["metadata"]["name"] for o in by_kind(objects, "Deployment")}
    assert "macaron-code" in names and "macaron-ui" not in names
    assert "macaron-ui" not in {o["metadata"]["name"] for o in objects if o["kind"] in ("Service", "HorizontalPodAutoscaler")}
    assert named(objects, "Deployment", "macaron-code")["spec"]["replicas"] == 5
    (base,) = _base_templates(objects)
    lora_paths = flag_values(_engine(base)["args"], "--lora-paths")
    assert "code@v3=/adapters/code/v3" in lora_paths
    assert not any(p.startswith("ui") for p in lora_paths)
    assert _config(objects)["specialists"]["code"]["adapter_version"] == "v3"
    pools = {k for k in _env(objects, "macaron-router") if k.startswith("MACARON_ROUTER__POOLS__")}
    assert pools == {"MACARON_ROUTER__POOLS__CHAT", "MACARON_ROUTER__POOLS__AGENT", "MACARON_ROUTER__POOLS__CODE"}


def test_only_the_services_specialist_profiles_are_accepted() -> None:
    from macaron.ports import SPECIALISTS

    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    assert schema["properties"]["specialists"]["propertyNames"]["enum"] == list(SPECIALISTS)
    with pytest.raises(helm.HelmValuesError, match="math"):
        render_objects({"specialists": {"math": {"port": 50065, "adapter": {"name": "math"}}}})


def test_routers_and_specialists_get_the_tokenizer_not_the_weights(renders, variant_renders) -> None:
    for objects in (renders["default"], renders["venti"], variant_renders["tokenizer-volume"]):
        for template in pod_templates(objects):
            if template.component not in ("router", "specialist"):
                continue
            (container,) = template.spec["containers"]
            mounts = {m["name"]: m for m in container["volumeMounts"]}
            assert "model" not in mounts and "adapters" not in mounts
            assert mounts["tokenizer"]["mountPath"] == "/models/tokenizer" and mounts["tokenizer"]["readOnly"]
    # Default: an init container copies only tokenizer and chat-template files out of the model.
    template = next(t for t in pod_templates(renders["default"]) if t.component == "router")
    (init,) = template.spec["initContainers"]
    script = init["args"][0]
    assert "chat_template.jinja" in script and "tokenizer.json" in script and "safetensors" not in script
    # With a dedicated tokenizer volume the model volume is not mounted at all.
    template = next(t for t in pod_templates(variant_renders["tokenizer-volume"]) if t.component == "router")
    assert "initContainers" not in template.spec
    assert "model" not in {v["name"] for v in template.spec["volumes"]}
    assert _config(variant_renders["tokenizer-volume"])["specialists"]["tokenizer_path"] == "/models/tokenizer"
    # The CPU stack uses the tiny model's tokenizer, which the image carries.
    assert "tokenizer_path" not in _config(renders["cpu"])["specialists"]


# --- services and wiring ------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_grpc_clients_balance_per_request_over_headless_services(renders, name: str) -> None:
    objects = renders[name]
    domain = f"{NAMESPACE}.svc.cluster.local"
    gateway, router = _env(objects, "macaron-gateway"), _env(objects, "macaron-router")
    assert gateway["MACARON_GATEWAY__ROUTER_TARGET"] == f"dns:///macaron-router-headless.{domain}:50051"
    assert named(objects, "Service", "macaron-router-headless")["spec"]["clusterIP"] == "None"
    for key, profile in _config(objects)["specialists"].items():
        if key not in ("chat", "agent", "code", "ui"):
            continue
        assert json.loads(router[f"MACARON_ROUTER__POOLS__{key.upper()}"]) == [
            f"dns:///macaron-{key}.{domain}:{profile['port']}"
        ]
        assert named(objects, "Service", f"macaron-{key}")["spec"]["clusterIP"] == "None"
    assert router["MACARON_ROUTER__KUBERNETES__ENABLED"] == "true"
    assert router["MACARON_ROUTER__KUBERNETES__SERVICE_NAME"] == "macaron-engine"
    assert router["MACARON_ROUTER__KUBERNETES__PORT_NAME"] == "http"
    discovery = _config(objects)["specialists"]["discovery"]
    assert discovery == {"mode": "dns", "dns_name": f"macaron-engine.{domain}", "dns_port": 30000}


SAMPLE_KEYS = json.dumps([{"name": "ops", "sha256": "ab" * 32}])


def _section_from_env(env: dict[str, str], section: str) -> dict:
    """MACARON_<SECTION>__A__B=value as {"a": {"b": value}} (JSON values decoded), as pydantic-settings reads them."""
    prefix = f"MACARON_{section.upper()}__"
    nested: dict = {}
    for name, value in env.items():
        if not name.startswith(prefix):
            continue
        *parents, leaf = name[len(prefix):].lower().split("__")
        node = nested
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = json.loads(value) if value[:1] in "[{" else value
    return nested


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_macaron_container_loads_its_configuration(renders, name: str, tmp_path, monkeypatch) -> None:
    """The rendered config.yaml plus each container's MACARON_* variables pass the services' own
    settings models: the configuration (load_settings), and the router's section on its own."""
    from macaron.config import MacaronSettings, load_settings
    from macaron.router.settings import RouterSettings

    objects = renders[name]
    config_file = tmp_path / "config.yaml"
    config_file.write_text(named(objects, "ConfigMap", "macaron-config")["data"]["config.yaml"])
    checked = set()
    for template in pod_templates(objects):
        for container in template.spec["containers"]:
            if container.get("command") != ["macaron"]:
                continue
            env: dict[str, str] = {}
            for var in container["env"]:
                if not var["name"].startswith("MACARON_") or var["name"] == "MACARON_CONFIG":
                    continue
                if "value" in var:
                    env[var["name"]] = var["value"].replace("$(REDIS_PASSWORD)", "pw")
                elif var["name"] == "MACARON_AUTH__API_KEYS":
                    env[var["name"]] = SAMPLE_KEYS  # the operator's Secret
                elif "fieldRef" in var.get("valueFrom", {}):
                    env[var["name"]] = NAMESPACE
                else:
                    env[var["name"]] = "redis://redis.example.com:6379/0"  # the external Redis Secret
            with monkeypatch.context() as patch:
                for key in [k for k in os.environ if k.startswith("MACARON_")]:
                    patch.delenv(key)
                for key, value in env.items():
                    patch.setenv(key, value)
                settings = load_settings(config_file)
            checked.add(template.component)
            assert settings.specialists.grace_period_s == DRAIN_GRACE
            if template.component in ("gateway", "router"):
                assert settings.auth.api_keys, "gateway and router listen beyond loopback: they need keys"
                assert settings.redis_url
            if template.component == "gateway":
                assert settings.gateway.host == "0.0.0.0"
                assert settings.gateway.router_target.startswith("dns:///macaron-router-headless.")
                assert settings.gateway.grace_period_s == DRAIN_GRACE
            if template.component == "specialist":
                key = template.labels["macaron-serve/specialist"]
                assert settings.specialists.profile(key).adapter == key
            if template.component == "router":
                section = _section_from_env(env, "router")
                router = (
                    settings.router if "router" in MacaronSettings.model_fields else RouterSettings.model_validate(section)
                )
                assert router.host == "0.0.0.0" and router.grace_period_s == DRAIN_GRACE
                assert router.kubernetes.enabled is True
                assert router.kubernetes.service_name == "macaron-engine" and router.kubernetes.port_name == "http"
                for key in ("chat", "agent", "code", "ui"):
                    assert getattr(router.pools, key)[0].startswith(f"dns:///macaron-{key}.")
    assert checked == {"gateway", "router", "specialist", "base"} if name == "cpu" else {"gateway", "router", "specialist"}


def test_the_router_is_exposed_to_sdk_users_only_when_asked(renders) -> None:
    assert named(renders["default"], "Service", "macaron-router")["spec"]["type"] == "ClusterIP"
    assert named(renders["tall"], "Service", "macaron-router")["spec"]["type"] == "LoadBalancer"
    ingress = named(renders["venti"], "Ingress", "macaron-router")
    assert ingress["spec"]["tls"] and ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/backend-protocol"] == "GRPC"


def test_redis_is_built_in_or_an_external_secret(renders, variant_renders) -> None:
    def redis_url_env(objects):
        gateway = named(objects, "Deployment", "macaron-gateway")
        return next(e for e in gateway["spec"]["template"]["spec"]["containers"][0]["env"] if e["name"] == "MACARON_REDIS_URL")

    assert named(renders["default"], "StatefulSet", "macaron-redis")
    assert redis_url_env(renders["default"])["value"] == f"redis://macaron-redis.{NAMESPACE}.svc.cluster.local:6379/0"
    assert not [s for s in by_kind(renders["tall"], "StatefulSet") if s["metadata"]["name"] == "macaron-redis"]
    assert redis_url_env(renders["tall"])["valueFrom"]["secretKeyRef"] == {"name": "macaron-redis", "key": "url"}
    secret = named(variant_renders["external-redis-url"], "Secret", "macaron-redis-url")
    assert redis_url_env(variant_renders["external-redis-url"])["valueFrom"]["secretKeyRef"]["name"] == "macaron-redis-url"
    assert secret["stringData"]["redis-url"].startswith("rediss://")
    env = named(variant_renders["redis-password"], "Deployment", "macaron-router")["spec"]["template"]["spec"]["containers"][0]["env"]
    names = [e["name"] for e in env]
    assert names.index("REDIS_PASSWORD") < names.index("MACARON_REDIS_URL")  # $(REDIS_PASSWORD) expands
    # Specialists do not use Redis.
    specialist = named(renders["default"], "Deployment", "macaron-chat")["spec"]["template"]["spec"]["containers"][0]
    assert "MACARON_REDIS_URL" not in {e["name"] for e in specialist["env"]}


# --- RBAC and privileges ------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_rbac_is_exactly_the_routers_endpointslice_reader(renders, name: str) -> None:
    objects = renders[name]
    assert not by_kind(objects, "ClusterRole") and not by_kind(objects, "ClusterRoleBinding")
    (role,) = by_kind(objects, "Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]}]
    (binding,) = by_kind(objects, "RoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "macaron-router", "namespace": NAMESPACE}]
    for template in pod_templates(objects):
        is_router = template.component == "router"
        assert template.spec["automountServiceAccountToken"] is is_router, template.owner
        assert template.spec["serviceAccountName"] == ("macaron-router" if is_router else "macaron")
    accounts = {a["metadata"]["name"]: a for a in by_kind(objects, "ServiceAccount")}
    assert accounts["macaron"]["automountServiceAccountToken"] is False


def test_dns_discovery_needs_no_rbac_and_no_token(variant_renders) -> None:
    objects = variant_renders["dns-discovery"]
    assert not by_kind(objects, "Role") and not by_kind(objects, "RoleBinding")
    assert all(t.spec["automountServiceAccountToken"] is False for t in pod_templates(objects))
    # The router then finds replicas the way specialists do: DNS of the headless engine Service.
    assert not any(k.startswith("MACARON_ROUTER__KUBERNETES__") for k in _env(objects, "macaron-router"))
    assert _config(objects)["specialists"]["discovery"]["mode"] == "dns"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_containers_run_with_least_privilege(renders, name: str) -> None:
    for template in pod_templates(renders[name]):
        pod_context = template.spec["securityContext"]
        assert pod_context["seccompProfile"]["type"] == "RuntimeDefault"
        for container in template.spec["containers"] + template.spec.get("initContainers", []):
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"]["drop"] == ["ALL"]
            assert not context.get("privileged")
            if container["image"].startswith("lmsysorg/sglang"):
                continue  # SGLang's image runs as root and writes its compile caches
            assert pod_context["runAsNonRoot"] is True
            assert context["readOnlyRootFilesystem"] is True


def test_the_image_matches_what_the_chart_expects() -> None:
    from macaron.devtools.k8s_manifests import REPO_ROOT

    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    uid = values["podSecurityContext"]["runAsUser"]
    assert f"USER {uid}:{values['podSecurityContext']['runAsGroup']}" in dockerfile
    assert 'ENTRYPOINT ["macaron"]' in dockerfile
    assert "torch==2.13.0" in dockerfile and "PIP_CONSTRAINT=/src/constraints.txt" in dockerfile
    assert "macaron assets build" in dockerfile  # the CPU stack's tiny model is in the image
    ignored = (REPO_ROOT / ".dockerignore").read_text().split()
    for needed in ("!pyproject.toml", "!README.md", "!constraints.txt", "!services/", "!router_service/", "!specialist_service/"):
        assert needed in ignored
