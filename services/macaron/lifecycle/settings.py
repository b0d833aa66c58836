"""Settings of adapter versions on the router (`router.lifecycle`): admin access, checks, rollback.

Importing this module stays light (pydantic only): the configuration imports it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from macaron.auth.settings import ApiKeyEntry


class AutoRollbackSettings(BaseModel):
    """While a canary runs, its error rate and TTFT p95 are compared with stable's over a sliding window.

    The canary is rolled back (and the reason recorded in the history) when, with at least
    `min_requests` canary requests in the window, its error rate exceeds stable's by more than
    `max_error_rate_increase`, or its TTFT p95 exceeds `max_ttft_p95_ratio` times stable's
    (stable's p95 taken as at least `ttft_floor_s`, so noise on a fast stable does not trip it).
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="Roll a canary back by itself when it is worse than stable.")
    window_s: float = Field(60.0, description="Sliding window of the comparison, in seconds.")
    min_requests: int = Field(10, description="Canary requests needed in the window before it is judged.")
    max_error_rate_increase: float = Field(
        0.05, description="Rolled back when canary error rate - stable error rate exceeds this (0.05 = 5 points)."
    )
    max_ttft_p95_ratio: float = Field(
        2.0, description="Rolled back when the canary's TTFT p95 exceeds this times stable's."
    )
    ttft_floor_s: float = Field(0.05, description="Stable's TTFT p95 is taken as at least this in the ratio.")
    check_s: float = Field(1.0, description="How often the window is evaluated.")


class LifecycleSettings(BaseModel):
    """Adapter versions: the admin service, load checks, draining before unload, automatic rollback."""

    model_config = ConfigDict(extra="forbid")

    admin_keys: list[ApiKeyEntry] = Field(
        default_factory=list,
        description="Keys accepted by the AdapterAdmin gRPC service (hashes, as auth.api_keys); without any, "
        "the admin service answers only on a loopback router address.",
    )
    inventory_refresh_s: float = Field(
        1.0, description="How often each replica's loaded adapters are read from its /v1/models after a change (and "
        "how often the discovered replica set is looked at)."
    )
    inventory_max_refresh_s: float = Field(
        8.0, description="While no replica's adapter list changes, the reads space out (doubling) up to this: the "
        "longest a change made behind the lifecycle's back (an operator, an engine restart) goes unseen. Changes "
        "made through any router's lifecycle are obeyed from the next request whatever this is (the version "
        "state's revision makes the router read the engines first); a new or vanished replica is read at once.",
    )
    engine_timeout_s: float = Field(30.0, description="Deadline of one load, unload or check call to an engine.")
    check_max_new_tokens: int = Field(
        2, description="Tokens generated with a freshly loaded version to check that it answers before it takes traffic."
    )
    unload_idle_s: float = Field(
        2.0, description="Unload waits until no request has used the version for this long (and none is in flight)."
    )
    unload_timeout_s: float = Field(
        120.0, description="Unload gives up (the version stays loaded, retiring) if it is still used after this long."
    )
    usage_heartbeat_s: float = Field(1.0, description="How often a router republishes its per-version usage.")
    usage_coalesce_s: float = Field(
        0.05, ge=0, description="A router publishes a version's start or end of use this long after it happens, every "
        "specialist in one write: the write a request triggers lands after it left for its specialist, off its path "
        "to the first token. Shorter than usage_heartbeat_s; 0: at once.",
    )
    usage_stale_s: float = Field(10.0, description="Usage of a router silent this long no longer counts.")
    gate_margin: float = Field(
        0.02, description="Promotion gate: a new version is refused when its eval score is below stable's by more."
    )
    gate_scorer: str = Field(
        "", description="Promotion gate scorer as module:function (higher is better); empty: no gate."
    )
    state_push: bool = Field(
        True, description="Version states are pushed to routers (a publish/subscribe message per change, each router "
        "keeps them in memory and acknowledges) instead of read from the store on every request. Off: every request "
        "reads them in its session read's round trip, as before.",
    )
    state_ack_timeout_s: float = Field(
        2.0, ge=0, description="With state_push, an operation returns once every live router acknowledged the "
        "change (so 'committed' means every router routes by it), or after this long (a router that did not "
        "acknowledge catches up within state_resync_s; the log names it).",
    )
    state_resync_s: float = Field(
        5.0, gt=0, description="With state_push, each router re-reads every version state this often whatever it "
        "was sent (a missed message or a dead subscription heals within it), and re-announces itself as live; a "
        "router silent for 3 times this no longer counts as live for acknowledgements.",
    )
    auto_rollback: AutoRollbackSettings = Field(
        default_factory=AutoRollbackSettings, description="Automatic rollback of a bad canary."
    )

    @model_validator(mode="after")
    def _inventory_bounds(self) -> "LifecycleSettings":
        if self.inventory_max_refresh_s < self.inventory_refresh_s:
            raise ValueError(f"inventory_max_refresh_s ({self.inventory_max_refresh_s}) must be at least "
                             f"inventory_refresh_s ({self.inventory_refresh_s})")
        return self

    @model_validator(mode="after")
    def _coalesce_within_heartbeat(self) -> "LifecycleSettings":
        if self.usage_coalesce_s >= self.usage_heartbeat_s:
            raise ValueError(f"usage_coalesce_s ({self.usage_coalesce_s}) must be shorter than usage_heartbeat_s "
                             f"({self.usage_heartbeat_s})")
        return self
