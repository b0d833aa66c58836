"""Where traces go (`telemetry`): nowhere by default, the console, or an OTLP collector.

Importing this module stays light (pydantic only): the configuration imports it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Exporter = Literal["none", "console", "otlp"]


class TelemetrySettings(BaseModel):
    """OpenTelemetry tracing of every hop (gateway → router → specialist → engine)."""

    model_config = ConfigDict(extra="forbid")

    exporter: Exporter = Field(
        "none", description="Span exporter: none (spans are made and propagated, not exported), console, or otlp."
    )
    otlp_endpoint: str = Field(
        "http://127.0.0.1:4318/v1/traces", description="OTLP/HTTP traces endpoint when exporter is otlp."
    )
    otlp_timeout_s: float = Field(10.0, description="Deadline of one OTLP export call.")
