"""Settings of the Ray Serve shape (`ray:` in the configuration file): cluster, HTTP ingress, and
replicas, autoscaling and resources per deployment.

Importing this module stays light (pydantic only): the configuration imports RaySettings.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

SPECIALIST_NAMES = ("chat", "agent", "code", "ui")


class Autoscaling(BaseModel):
    """Serve's autoscaling on ongoing requests per replica (`autoscaling_config`)."""

    model_config = ConfigDict(extra="forbid")

    min_replicas: int = Field(1, ge=0, description="Fewest replicas.")
    max_replicas: int = Field(4, ge=1, description="Most replicas.")
    target_ongoing_requests: float = Field(
        4.0, gt=0, description="Ongoing requests per replica the autoscaler aims for (a stream counts until it ends)."
    )
    look_back_period_s: float = Field(30.0, gt=0, description="Window the ongoing-request average is taken over.")
    upscale_delay_s: float = Field(10.0, ge=0, description="Seconds the load must stay high before replicas are added.")
    downscale_delay_s: float = Field(120.0, ge=0, description="Seconds the load must stay low before replicas are removed.")

    @model_validator(mode="after")
    def _ordered(self) -> Autoscaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas {self.min_replicas} is above max_replicas {self.max_replicas}")
        return self


class DeploymentScale(BaseModel):
    """Replicas, autoscaling and resources of one Serve deployment."""

    model_config = ConfigDict(extra="forbid")

    num_replicas: int = Field(1, ge=1, description="Fixed replica count, used when autoscaling is not set.")
    autoscaling: Autoscaling | None = Field(None, description="Autoscale on ongoing requests instead of a fixed count.")
    num_cpus: float = Field(0.5, ge=0, description="CPUs reserved per replica (Ray resource).")
    num_gpus: float = Field(0.0, ge=0, description="GPUs reserved per replica (Ray resource).")
    max_ongoing_requests: int = Field(64, ge=1, description="Requests one replica runs at once; more wait in the caller's queue.")
    max_queued_requests: int = Field(
        256, ge=-1, description="Requests a caller may queue for this deployment before it answers overload "
        "(RESOURCE_EXHAUSTED / 429 / 503); -1: no limit.",
    )
    graceful_shutdown_timeout_s: float = Field(
        30.0, ge=0, description="How long a replica being removed waits for its ongoing requests (streams) to finish."
    )
    graceful_shutdown_wait_loop_s: float = Field(
        2.0, gt=0, description="How often a replica being removed checks whether its ongoing requests have finished."
    )

    def serve_options(self) -> dict[str, Any]:
        """Keyword arguments for `Deployment.options(...)`."""
        options: dict[str, Any] = {
            "max_ongoing_requests": self.max_ongoing_requests,
            "max_queued_requests": self.max_queued_requests,
            "graceful_shutdown_timeout_s": self.graceful_shutdown_timeout_s,
            "graceful_shutdown_wait_loop_s": self.graceful_shutdown_wait_loop_s,
            "ray_actor_options": {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus},
        }
        if self.autoscaling is not None:
            options["autoscaling_config"] = self.autoscaling.model_dump()
        else:
            options["num_replicas"] = self.num_replicas
        return options


def _scale(**values: Any) -> Any:
    return lambda: DeploymentScale(**values)


class RaySettings(BaseModel):
    """`macaron ray`: the stack as Ray Serve deployments (engine, four specialists, router, gateway)."""

    model_config = ConfigDict(extra="forbid")

    address: str | None = Field(
        None, description="Ray cluster to join (e.g. `auto` inside a KubeRay pod, or `ray://head:10001`); "
        "empty: start a local cluster.",
    )
    num_cpus: int | None = Field(None, ge=1, description="CPUs of a local cluster (empty: all of this machine's).")
    app_name: str = Field("macaron", description="Serve application name.")
    route_prefix: str = Field("/", description="HTTP path prefix of the gateway ingress.")
    http_host: str = Field("127.0.0.1", description="Address Serve's HTTP proxy binds (the gateway ingress); "
                           "any other than loopback requires auth.api_keys.")
    http_port: int = Field(8000, ge=0, le=65535, description="Port of Serve's HTTP proxy (the gateway ingress).")
    engine_bind_host: str = Field(
        "127.0.0.1", description="Address each engine replica's HTTP server binds; on a multi-node cluster use "
        "0.0.0.0 (replicas then advertise their node's IP) and set engine.api_key.",
    )
    engine_register_interval_s: float = Field(
        2.0, gt=0, description="How often an engine replica renews its entry in the engine directory "
        "(an entry not renewed for three intervals is dropped).",
    )
    engine: DeploymentScale = Field(
        default_factory=_scale(num_cpus=1.0),
        description="The embedded engine replicas (router placement picks among them; their HTTP does not travel "
        "through Serve handles, so they scale by num_replicas, not autoscaling).",
    )
    specialists: DeploymentScale = Field(
        default_factory=_scale(num_cpus=0.25), description="Each of the four specialist deployments."
    )
    specialist_overrides: dict[str, DeploymentScale] = Field(
        default_factory=dict, description="Per-specialist settings (chat, agent, code, ui) replacing `specialists`.",
    )
    router: DeploymentScale = Field(default_factory=_scale(num_cpus=0.25), description="The L0 router deployment.")
    gateway: DeploymentScale = Field(
        default_factory=_scale(num_cpus=0.25), description="The OpenAI-compatible gateway: Serve's HTTP ingress."
    )

    @model_validator(mode="after")
    def _known_specialists(self) -> RaySettings:
        unknown = sorted(set(self.specialist_overrides) - set(SPECIALIST_NAMES))
        if unknown:
            raise ValueError(f"specialist_overrides names unknown specialists {unknown}; use {list(SPECIALIST_NAMES)}")
        return self

    def specialist(self, name: str) -> DeploymentScale:
        """The scale of one specialist's deployment."""
        return self.specialist_overrides.get(name, self.specialists)
