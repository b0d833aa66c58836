"""Helpers for the chart tests: rendering, schema validation, and a NetworkPolicy evaluator.

Built-in kinds are validated strictly against the Kubernetes schemas that
`kubernetes-validate` ships (the same files and resolution as its `validate()`, loaded once
per version instead of once per object); custom resources against the CRD schemas pinned in
`helm/crd-schemas/`.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import kubernetes_validate
import referencing
import yaml
from kubernetes_validate import utils as kv_utils

from macaron.devtools.k8s_manifests import CHART_DIR, REPO_ROOT, load_values, render_chart, split_documents

CRD_SCHEMA_DIR = REPO_ROOT / "helm" / "crd-schemas"
EXAMPLES = {
    "default": None,
    "venti": CHART_DIR / "examples" / "values-venti.yaml",
    "tall": CHART_DIR / "examples" / "values-tall.yaml",
    "cpu": CHART_DIR / "examples" / "values-cpu.yaml",
}
GPU_RENDERS = ("default", "venti", "tall")
VARIANTS: dict[str, dict[str, Any]] = {
    # Values the examples leave out, rendered too so that every template path is validated.
    "external-redis-url": {"redis": {"enabled": False, "external": {"url": "rediss://:secret@redis.example.com:6380/0"}}},
    "redis-password": {"redis": {"auth": {"existingSecret": "macaron-redis-auth"}}},
    "dns-discovery": {"router": {"discovery": "dns"}},
    "grpc-tls": {"tls": {"enabled": True, "mutual": True, "serverName": "macaron.internal"}},
    "api-cidrs": {"networkPolicy": {"kubeApiCidrs": ["10.0.0.1/32"], "kubeApiPorts": [6443]}},
    "tokenizer-volume": {
        "model": {"tokenizer": {"volume": {"persistentVolumeClaim": {"claimName": "tok", "readOnly": True}}}},
        "router": {"service": {"type": "LoadBalancer", "loadBalancerSourceRanges": ["192.0.2.0/24"]}},
    },
}
NAMESPACE = "macaron"
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# --- rendering --------------------------------------------------------------------------


def objects_of(rendered: dict[str, str]) -> list[dict[str, Any]]:
    """Every Kubernetes object of a render, in template order."""
    found = []
    for path in sorted(rendered):
        if path.endswith((".yaml", ".yml")):
            for document in split_documents(rendered[path]):
                obj = yaml.load(document, Loader=_YAML_LOADER)
                if obj:
                    found.append(obj)
    return found


def render_objects(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return objects_of(render_chart(values, namespace=NAMESPACE))


def example_values(name: str) -> dict[str, Any] | None:
    return load_values(EXAMPLES[name])


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def named(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind} {name}, found {len(matches)}"
    return matches[0]


@dataclass
class PodTemplate:
    """One pod template of a workload (a LeaderWorkerSet has two: leader and worker)."""

    owner: str
    role: str
    template: dict[str, Any]

    @property
    def labels(self) -> dict[str, str]:
        return self.template["metadata"]["labels"]

    @property
    def spec(self) -> dict[str, Any]:
        return self.template["spec"]

    @property
    def component(self) -> str:
        return self.labels["app.kubernetes.io/component"]


def pod_templates(objects: list[dict[str, Any]]) -> list[PodTemplate]:
    found = []
    for obj in objects:
        owner = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] in ("Deployment", "StatefulSet"):
            found.append(PodTemplate(owner, "pod", obj["spec"]["template"]))
        elif obj["kind"] == "LeaderWorkerSet":
            lwt = obj["spec"]["leaderWorkerTemplate"]
            found.append(PodTemplate(owner, "leader", lwt["leaderTemplate"]))
            found.append(PodTemplate(owner, "worker", lwt["workerTemplate"]))
    return found


def flag_values(args: list[str], flag: str) -> list[str] | None:
    """The values after `flag` up to the next `--flag` (None when the flag is absent)."""
    if flag not in args:
        return None
    i = args.index(flag) + 1
    values = []
    while i < len(args) and not args[i].startswith("--"):
        values.append(args[i])
        i += 1
    return values


# --- schema validation ------------------------------------------------------------------


def supported_kube_versions() -> tuple[str, str]:
    """(oldest, newest) Kubernetes minor the chart supports: Chart.yaml's kubeVersion floor, and
    the newest release kubernetes-validate ships."""
    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    floor = re.match(r">=\s*(\d+\.\d+)", chart["kubeVersion"])
    assert floor, chart["kubeVersion"]
    return floor.group(1), kv_utils.major_minor(kv_utils.latest_version())


def _minor(version: str) -> tuple[int, int]:
    major, minor = kv_utils.major_minor(version).split(".")
    return int(major), int(minor)


def _schema_dir(version: str) -> str:
    """The strict schemas of the newest shipped release not newer than `version`."""
    shipped = [v for v in kv_utils.all_versions() if _minor(v) <= _minor(version)]
    if not shipped:
        raise kubernetes_validate.VersionNotSupportedError(version)
    return f"kubernetes-json-schema/v{shipped[-1]}-local-strict"


@functools.cache
def _kube_validator(version: str, kind: str, api_version: str) -> jsonschema.protocols.Validator:
    # Same file choice and reference resolution as kubernetes_validate.validate(strict=True).
    schema_dir = _schema_dir(version)
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = kv_utils.schema_contents(f"{schema_dir}/{kind.lower()}-{group}.json", version)
    except FileNotFoundError:
        raise kubernetes_validate.SchemaNotFoundError(version=version, kind=kind, api_version=api_version)
    definitions = kv_utils.schema_contents(f"{schema_dir}/_definitions.json", version)
    registry = referencing.Resource.from_contents(schema) @ referencing.Registry()
    registry = referencing.Resource.from_contents(definitions) @ registry
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def _strictify(node: Any) -> Any:
    """CRD schema with unknown fields refused wherever the API server's strict validation would."""
    if isinstance(node, list):
        return [_strictify(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _strictify(value) for key, value in node.items() if key != "properties"}
    if "properties" in node:
        out["properties"] = {name: _strictify(sub) for name, sub in node["properties"].items()}
        if "additionalProperties" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    return out


@functools.cache
def _crd_validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    group, _, version = api_version.rpartition("/")
    path = CRD_SCHEMA_DIR / f"{group}_{version}_{kind}.json"
    if not path.is_file():
        raise LookupError(f"no pinned CRD schema for {api_version} {kind} (expected {path})")
    schema = _strictify(json.loads(path.read_text()))
    # OpenAPI v3 schemas (draft-04 style keywords) as the API server reads them.
    return jsonschema.Draft4Validator(schema)


_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def validation_errors(obj: dict[str, Any], version: str) -> list[str]:
    """Strict-mode schema errors of one rendered object against Kubernetes `version` (e.g. 1.27)."""
    where = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
    try:
        validator = _kube_validator(version, obj["kind"], obj["apiVersion"])
    except kubernetes_validate.SchemaNotFoundError:
        validator = None
    if validator is not None:
        return [f"{where} @ {list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(obj)]
    errors = [f"{where} @ {list(e.absolute_path)}: {e.message}" for e in _crd_validator(obj["apiVersion"], obj["kind"]).iter_errors(obj)]
    meta = obj.get("metadata", {})
    unknown = set(meta) - {"name", "namespace", "labels", "annotations"}
    if unknown:
        errors.append(f"{where}: unexpected metadata fields {sorted(unknown)}")
    if not _DNS_SUBDOMAIN.match(meta.get("name", "")) or len(meta.get("name", "")) > 253:
        errors.append(f"{where}: metadata.name is not a DNS subdomain")
    # Pod templates inside custom resources: also against the core PodTemplateSpec of this version.
    if obj["kind"] == "LeaderWorkerSet":
        pod_validator = _pod_template_validator(version)
        for role in ("leaderTemplate", "workerTemplate"):
            template = obj["spec"]["leaderWorkerTemplate"].get(role)
            if template is not None:
                errors += [f"{where} {role} @ {list(e.absolute_path)}: {e.message}" for e in pod_validator.iter_errors(template)]
    if obj["kind"] == "RayService":
        pod_validator = _pod_template_validator(version)
        cluster = obj["spec"]["rayClusterConfig"]
        groups = [("head", cluster["headGroupSpec"])] + [(g["groupName"], g) for g in cluster.get("workerGroupSpecs", [])]
        for group, spec in groups:
            errors += [f"{where} {group} @ {list(e.absolute_path)}: {e.message}"
                       for e in pod_validator.iter_errors(spec["template"])]
    return errors


@functools.cache
def _pod_template_validator(version: str) -> jsonschema.protocols.Validator:
    schema_dir = _schema_dir(version)
    schema = kv_utils.schema_contents(f"{schema_dir}/podtemplatespec-v1.json", version)
    definitions = kv_utils.schema_contents(f"{schema_dir}/_definitions.json", version)
    registry = referencing.Resource.from_contents(schema) @ referencing.Registry()
    registry = referencing.Resource.from_contents(definitions) @ registry
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


# --- NetworkPolicy evaluation -----------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """A traffic source or destination: a pod (labels, namespace) or an address outside the cluster."""

    name: str
    labels: dict[str, str] = field(default_factory=dict, hash=False)
    namespace: str | None = None
    namespace_labels: dict[str, str] = field(default_factory=dict, hash=False)
    ip: str | None = None

    @property
    def is_pod(self) -> bool:
        return self.namespace is not None


def pod(name: str, labels: dict[str, str], namespace: str = NAMESPACE) -> Endpoint:
    return Endpoint(name, labels, namespace, {"kubernetes.io/metadata.name": namespace})


def outside(name: str, ip: str) -> Endpoint:
    return Endpoint(name, ip=ip)


def selector_matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    if selector is None:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _peer_matches(peer: dict[str, Any], other: Endpoint, policy_namespace: str) -> bool:
    if "ipBlock" in peer:
        if other.is_pod or other.ip is None:
            return False
        block = peer["ipBlock"]
        address = ipaddress.ip_address(other.ip)
        if address not in ipaddress.ip_network(block["cidr"]):
            return False
        return not any(address in ipaddress.ip_network(c) for c in block.get("except") or [])
    if not other.is_pod:
        return False
    if "namespaceSelector" in peer:
        if not selector_matches(peer["namespaceSelector"], other.namespace_labels):
            return False
    elif other.namespace != policy_namespace:
        return False
    return selector_matches(peer.get("podSelector"), other.labels)


def _port_matches(ports: list[dict[str, Any]] | None, port: int, protocol: str) -> bool:
    if not ports:
        return True
    for entry in ports:
        if entry.get("protocol", "TCP") != protocol:
            continue
        wanted = entry.get("port")
        assert wanted is None or isinstance(wanted, int), f"named ports are not evaluated: {entry}"
        if wanted is None or wanted == port or (entry.get("endPort") and wanted <= port <= entry["endPort"]):
            return True
    return False


def _allowed(policies: list[dict[str, Any]], subject: Endpoint, other: Endpoint, port: int, protocol: str, direction: str) -> bool:
    """Whether the policies that select `subject` admit traffic with `other` in `direction`."""
    if not subject.is_pod:
        return True  # not a pod: no NetworkPolicy applies to it
    policy_type, rules_key, peers_key = (
        ("Ingress", "ingress", "from") if direction == "ingress" else ("Egress", "egress", "to")
    )
    selecting = [
        p
        for p in policies
        if p["metadata"].get("namespace", NAMESPACE) == subject.namespace
        and policy_type in p["spec"].get("policyTypes", ["Ingress"])
        and selector_matches(p["spec"]["podSelector"], subject.labels)
    ]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get(rules_key) or []:
            peers = rule.get(peers_key)
            if peers and not any(_peer_matches(peer, other, policy["metadata"].get("namespace", NAMESPACE)) for peer in peers):
                continue
            if _port_matches(rule.get("ports"), port, protocol):
                return True
    return False


def can_connect(policies: list[dict[str, Any]], source: Endpoint, dest: Endpoint, port: int, protocol: str = "TCP") -> bool:
    """Whether `source` may open a connection to `dest:port` under `policies` (both directions checked)."""
    return _allowed(policies, source, dest, port, protocol, "egress") and _allowed(policies, dest, source, port, protocol, "ingress")


def component_pods(objects: list[dict[str, Any]]) -> Iterator[tuple[PodTemplate, Endpoint]]:
    for template in pod_templates(objects):
        yield template, pod(f"{template.owner}:{template.role}", template.labels)
