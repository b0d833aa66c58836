"""The Serve application: `build_app(settings)`, and `build` for Serve config files.

    serve run macaron.rayserve.app:build config=examples/macaron.yaml
    # or in a Serve config file (KubeRay RayService serveConfigV2):
    #   applications: [{name: macaron, import_path: "macaron.rayserve.app:build", args: {config: /etc/macaron/macaron.yaml}}]

The graph: Gateway (ingress) -> Router -> Specialist-{chat,agent,code,ui}; Router also holds the
Engine handle so the engines are part of the application, and each Engine holds the
EngineDirectory. Every replica gets the same settings object, with the `ray` section reset to
its defaults: scaling one deployment changes only that deployment's options, which Serve
applies in place (no other replica restarts).
"""

from __future__ import annotations

from typing import Any

from macaron.config import MacaronSettings, load_settings
from macaron.ports import SPECIALISTS
from macaron.rayserve.settings import RaySettings

ENGINE, ROUTER, GATEWAY = "Engine", "Router", "Gateway"


def specialist_deployment_name(name: str) -> str:
    return f"Specialist-{name}"


def replica_settings(settings: MacaronSettings) -> MacaronSettings:
    """What every replica is built from: engines found through the directory, the router's pools
    as Serve targets, internal servers on loopback, and the `ray` section reset (see the module doc)."""
    from macaron.router.forwarder import SERVE_PREFIX

    ray = settings.ray
    discovery = settings.specialists.discovery.model_copy(update={"mode": "ray", "ray_app": ray.app_name})
    specialists = settings.specialists.model_copy(update={"discovery": discovery, "host": "127.0.0.1"})
    pools = settings.router.pools.model_copy(update={name: [f"{SERVE_PREFIX}{name}"] for name in SPECIALISTS})
    router = settings.router.model_copy(update={
        "pools": pools, "discovery": None, "host": "127.0.0.1",
        "kubernetes": settings.router.kubernetes.model_copy(update={"enabled": False}),
    })
    gateway = settings.gateway.model_copy(update={"host": ray.http_host, "port": ray.http_port,
                                                  "router_target": f"serve:{ROUTER}"})
    return settings.model_copy(update={"specialists": specialists, "router": router, "gateway": gateway,
                                       "ray": RaySettings()})


def build_app(settings: MacaronSettings) -> Any:
    """The bound Serve application (an `Application` for `serve.run`)."""
    from macaron.rayserve.deployments import (
        EngineDeployment,
        EngineDirectoryDeployment,
        GatewayDeployment,
        RouterDeployment,
        SpecialistDeployment,
    )
    from macaron.rayserve.directory import DIRECTORY_DEPLOYMENT

    ray = settings.ray
    inner = replica_settings(settings)
    directory = EngineDirectoryDeployment.options(name=DIRECTORY_DEPLOYMENT).bind()
    engines = EngineDeployment.options(name=ENGINE, **ray.engine.serve_options()).bind(
        inner, directory, ray.engine_bind_host, ray.engine_register_interval_s
    )
    specialists = {
        name: SpecialistDeployment.options(name=specialist_deployment_name(name), **ray.specialist(name).serve_options())
        .bind(inner, name)
        for name in SPECIALISTS
    }
    router = RouterDeployment.options(name=ROUTER, **ray.router.serve_options()).bind(inner, specialists, engines)
    return GatewayDeployment.options(name=GATEWAY, **ray.gateway.serve_options()).bind(inner, router)


def build(args: dict[str, Any]) -> Any:
    """Serve's application builder: `args["config"]` is the YAML configuration file (optional)."""
    unknown = sorted(set(args) - {"config"})
    if unknown:
        raise ValueError(f"unknown application args {unknown}; the only one is `config` (a YAML configuration file)")
    return build_app(load_settings(args.get("config")))
