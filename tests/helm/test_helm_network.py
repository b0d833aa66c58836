"""NetworkPolicies, evaluated over the rendered pods: who may reach whom, on which port."""

from __future__ import annotations

import pytest
from helm_checks import EXAMPLES, by_kind, can_connect, component_pods, outside, pod

SPECIALIST_PORTS = (50061, 50062, 50063, 50064)

INTERNET = outside("a client on the internet", "198.51.100.7")
API_SERVER = outside("the Kubernetes API server", "10.0.0.1")
DNS = pod("kube-dns", {"k8s-app": "kube-dns"}, namespace="kube-system")
PROMETHEUS = pod("prometheus", {"app.kubernetes.io/name": "prometheus"}, namespace="monitoring")
FAKE_PROMETHEUS = pod("a pod labelled prometheus elsewhere", {"app.kubernetes.io/name": "prometheus"}, namespace="tenant-x")
UNLABELLED_IN_MONITORING = pod("another pod of the monitoring namespace", {"app": "grafana"}, namespace="monitoring")
INGRESS_CONTROLLER = pod("ingress-nginx", {"app.kubernetes.io/name": "ingress-nginx"}, namespace="ingress-nginx")
NEIGHBOUR = pod("another app in the namespace", {"app": "other"})


def _world(objects):
    pods: dict[str, list] = {}
    for template, endpoint in component_pods(objects):
        key = template.component if template.role in ("pod", "single") else f"{template.component}-{template.role}"
        if template.component == "base" and template.role == "pod":
            key = "base"
        pods.setdefault(key, []).append(endpoint)
    # One representative pod per component (every specialist shares the component's policy).
    world = {key: endpoints[0] for key, endpoints in pods.items()}
    if "base-leader" in world:
        world["base"] = world["base-leader"]
    return by_kind(objects, "NetworkPolicy"), world


@pytest.fixture(params=sorted(EXAMPLES))
def example(request, renders):
    return request.param, *_world(renders[request.param])


def test_every_pod_of_the_release_is_covered_by_a_policy(example) -> None:
    _, policies, world = example
    assert policies
    for endpoint in world.values():
        # Default deny: nothing the policies do not name gets in.
        assert not can_connect(policies, NEIGHBOUR, endpoint, 12345)


def test_from_outside_only_the_gateway_and_an_external_router_are_reachable(example) -> None:
    name, policies, world = example
    client = INGRESS_CONTROLLER if name == "venti" else INTERNET  # venti admits only its Ingress controller
    assert can_connect(policies, client, world["gateway"], 8080)
    router_external = name in ("venti", "tall")
    assert can_connect(policies, client, world["router"], 50051) is router_external
    for port in SPECIALIST_PORTS:
        assert not can_connect(policies, client, world["specialist"], port)
        assert not can_connect(policies, INTERNET, world["specialist"], port)
    assert not can_connect(policies, client, world["base"], 30000)
    if "redis" in world:
        assert not can_connect(policies, client, world["redis"], 6379)
    if name == "venti":
        assert not can_connect(policies, INTERNET, world["gateway"], 8080)
        assert not can_connect(policies, INTERNET, world["router"], 50051)


def test_only_routers_reach_specialists(example) -> None:
    """The real call graph: the gateway calls the router (SDK), never a specialist."""
    _, policies, world = example
    for port in SPECIALIST_PORTS:
        assert can_connect(policies, world["router"], world["specialist"], port)
        assert not can_connect(policies, world["gateway"], world["specialist"], port)
        assert not can_connect(policies, world["base"], world["specialist"], port)
        assert not can_connect(policies, NEIGHBOUR, world["specialist"], port)
    assert can_connect(policies, world["gateway"], world["router"], 50051)
    assert not can_connect(policies, world["specialist"], world["router"], 50051)


def test_only_specialists_and_routers_reach_the_base_group(example) -> None:
    _, policies, world = example
    assert can_connect(policies, world["specialist"], world["base"], 30000)
    assert can_connect(policies, world["router"], world["base"], 30000)
    assert not can_connect(policies, world["gateway"], world["base"], 30000)
    assert not can_connect(policies, NEIGHBOUR, world["base"], 30000)
    assert not can_connect(policies, world["base"], INTERNET, 443)  # no way out for the weights' pods
    # KV-cache events: the routers subscribe to every engine's publisher; nobody else does
    assert can_connect(policies, world["router"], world["base"], 5557)
    assert can_connect(policies, world["router"], world["base"], 5558)  # the events' replay socket
    assert not can_connect(policies, world["gateway"], world["base"], 5558)
    assert not can_connect(policies, world["specialist"], world["base"], 5557)
    assert not can_connect(policies, world["gateway"], world["base"], 5557)


def test_leaders_and_workers_of_a_group_talk_on_any_port(renders) -> None:
    policies, world = _world(renders["venti"])
    leader, worker = world["base-leader"], world["base-worker"]
    for port in (20000, 29500, 30000, 41234):
        assert can_connect(policies, worker, leader, port)
        assert can_connect(policies, leader, worker, port)
    assert not can_connect(policies, world["specialist"], worker, 20000)


def test_redis_is_for_routers_and_gateways(example) -> None:
    name, policies, world = example
    if "redis" not in world:
        assert name == "tall"  # external Redis
        assert can_connect(policies, world["router"], outside("managed redis", "10.20.0.5"), 6380)
        return
    assert can_connect(policies, world["router"], world["redis"], 6379)
    assert can_connect(policies, world["gateway"], world["redis"], 6379)
    assert not can_connect(policies, world["specialist"], world["redis"], 6379)
    assert not can_connect(policies, world["base"], world["redis"], 6379)
    assert not can_connect(policies, world["redis"], INTERNET, 443)


def test_dns_egress_is_allowed_and_nothing_else_leaves(example) -> None:
    _, policies, world = example
    for key, endpoint in world.items():
        if key == "redis":
            continue
        assert can_connect(policies, endpoint, DNS, 53, "UDP"), key
        assert can_connect(policies, endpoint, DNS, 53, "TCP"), key
        assert not can_connect(policies, endpoint, INTERNET, 80), key


def test_only_the_router_reaches_the_kubernetes_api(example) -> None:
    _, policies, world = example
    assert can_connect(policies, world["router"], API_SERVER, 443)
    assert can_connect(policies, world["router"], API_SERVER, 6443)
    for key in ("gateway", "specialist", "base"):
        assert not can_connect(policies, world[key], API_SERVER, 443), key


def test_api_access_narrows_to_the_given_cidrs(variant_renders) -> None:
    policies, world = _world(variant_renders["api-cidrs"])
    assert can_connect(policies, world["router"], API_SERVER, 6443)
    assert not can_connect(policies, world["router"], API_SERVER, 443)
    assert not can_connect(policies, world["router"], outside("elsewhere", "10.9.9.9"), 6443)


def test_dns_discovery_has_no_api_access(variant_renders) -> None:
    policies, world = _world(variant_renders["dns-discovery"])
    assert not can_connect(policies, world["router"], API_SERVER, 443)
    assert can_connect(policies, world["router"], world["base"], 30000)


def test_prometheus_scrapes_metrics_ports_only(example) -> None:
    name, policies, world = example
    assert can_connect(policies, PROMETHEUS, world["router"], 51051)
    for port in SPECIALIST_PORTS:
        assert can_connect(policies, PROMETHEUS, world["specialist"], port + 1000)
        assert not can_connect(policies, PROMETHEUS, world["specialist"], port)
    assert can_connect(policies, PROMETHEUS, world["base"], 30000)  # SGLang's /metrics
    assert can_connect(policies, PROMETHEUS, world["gateway"], 8080)  # the gateway's /metrics
    if name not in ("venti", "tall"):
        assert not can_connect(policies, PROMETHEUS, world["router"], 50051)
    if "redis" in world:
        assert not can_connect(policies, PROMETHEUS, world["redis"], 6379)


def test_prometheus_is_selected_by_namespace_and_label(example) -> None:
    """A prometheus label in another namespace, or another pod of the monitoring namespace, scrapes nothing."""
    _, policies, world = example
    for intruder in (FAKE_PROMETHEUS, UNLABELLED_IN_MONITORING):
        assert not can_connect(policies, intruder, world["router"], 51051), intruder.name
        for port in SPECIALIST_PORTS:
            assert not can_connect(policies, intruder, world["specialist"], port + 1000), intruder.name
        assert not can_connect(policies, intruder, world["base"], 30000), intruder.name
