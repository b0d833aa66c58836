"""Settings of the OpenAI-compatible REST gateway (`gateway:` section of the configuration).

Light on purpose (pydantic only): the configuration imports it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from macaron.admission import AdmissionSettings
from macaron.ports import GATEWAY_PORT, ROUTER_PORT


class GatewaySettings(BaseModel):
    """The REST gateway: where it listens, how it reaches the router, its request limits."""

    model_config = ConfigDict(extra="forbid")

    host: str = Field(
        "127.0.0.1",
        description="Address the gateway binds to; any non-loopback address requires auth.api_keys.",
    )
    port: int = Field(GATEWAY_PORT, description="Port of the gateway's HTTP server.")
    router_target: str = Field(
        f"127.0.0.1:{ROUTER_PORT}", description="The router's gRPC address (host:port), reached through the SDK."
    )
    router_tls: bool = Field(False, description="Use TLS to the router (system roots unless router_ca_file is set).")
    router_ca_file: str | None = Field(None, description="PEM file of the CA that signed the router's certificate.")
    router_server_name: str | None = Field(
        None, description="Name to check the router's certificate against, when it differs from router_target's host."
    )
    router_timeout_s: float = Field(
        600.0, gt=0, description="Longest deadline of one request to the router (the whole stream); a client's shorter "
        "deadline (x-macaron-timeout, or the openai clients' x-stainless-read-timeout) replaces it."
    )
    deadline_margin_s: float = Field(
        2.0, ge=0, description="How long before a client's own deadline the gateway gives up and answers 504 (type "
        "timeout), so the answer arrives before the client stops waiting; at most a quarter of the client's time."
    )
    router_max_retries: int = Field(
        2, description="Retries of a router call that failed with UNAVAILABLE before its first chunk."
    )
    max_body_bytes: int = Field(
        4 * 1024 * 1024, description="Largest request body accepted; a larger one is answered 413."
    )
    max_json_depth: int = Field(
        64, ge=4, description="Deepest nesting of objects and arrays in a request body (response_format schemas "
        "included); deeper is a 400 before anything parses it further."
    )
    max_messages: int = Field(1024, description="Most messages in one chat request; more is a 400.")
    admission: AdmissionSettings = Field(
        default_factory=AdmissionSettings, description="Admission control: completions in flight at once on this "
        "replica; the excess gets 429 with Retry-After at once, before auth, routing or any queue."
    )
    grace_period_s: float = Field(
        10.0, description="On SIGTERM: seconds in-flight requests and streams get to finish before the gateway exits."
    )
    playground: bool = Field(
        True, description="Serve the playground page at GET / (a chat that shows each route and renders A2UI answers); "
        "its API calls use the same keys as any client."
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="Log level of the gateway.")
