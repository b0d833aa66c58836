"""Tracing and request ids shared by every hop (gateway → router → specialist → engine).

W3C trace context (`traceparent`, `tracestate`) and `x-request-id` travel in HTTP headers and
gRPC metadata alike; `inject`/`extract` work on any mutable mapping of lower-case keys, so
the same two calls serve both transports.
"""

from __future__ import annotations

import logging
import uuid
from contextvars import ContextVar
from typing import TYPE_CHECKING, Iterable, Literal, Mapping, MutableMapping

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

if TYPE_CHECKING:
    from macaron.telemetry.settings import TelemetrySettings

REQUEST_ID_KEY = "x-request-id"
"""Header / metadata key carrying the caller's request id through every hop."""
MAX_REQUEST_ID_LENGTH = 128
DEADLINE_HEADER = "x-macaron-timeout"
"""Header carrying the seconds the caller still waits: a client sends it to the gateway, the load generator
sends it, the engine client sends its time left to the engine, and the embedded engine stops the request then."""

_request_id: ContextVar[str | None] = ContextVar("macaron_request_id", default=None)
_configured = False


def setup_tracing(
    service_name: str,
    exporter: Literal["none", "console", "otlp"] = "none",
    *,
    otlp_endpoint: str | None = None,
    otlp_timeout_s: float = 10.0,
) -> None:
    """Installs a tracer provider once per process (spans are created either way, exported if asked).

    `otlp` sends spans over OTLP/HTTP to `otlp_endpoint` in the background (batched)."""
    global _configured
    if _configured:
        return
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if exporter == "console":
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    elif exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_endpoint, timeout=otlp_timeout_s)))
    trace.set_tracer_provider(provider)
    _configured = True


def setup_tracing_from(settings: "TelemetrySettings", service_name: str) -> None:
    """`setup_tracing` with the configuration's telemetry section."""
    setup_tracing(service_name, settings.exporter, otlp_endpoint=settings.otlp_endpoint,
                  otlp_timeout_s=settings.otlp_timeout_s)


def add_span_processor(processor: SpanProcessor) -> None:
    """Adds a processor (e.g. an in-memory exporter in tests) to this process's provider."""
    setup_tracing("macaron")
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        raise RuntimeError("another tracer provider is installed: add the processor to it")
    provider.add_span_processor(processor)


def tracer(name: str) -> trace.Tracer:
    """A tracer for one module."""
    return trace.get_tracer(name)


def inject(carrier: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Adds the current trace context and request id to outgoing headers/metadata."""
    propagate.inject(carrier)
    request_id = _request_id.get()
    if request_id:
        carrier[REQUEST_ID_KEY] = request_id
    return carrier


def extract(carrier: Mapping[str, str]) -> otel_context.Context:
    """The trace context carried by incoming headers/metadata (keys compared lower-case)."""
    return propagate.extract({k.lower(): v for k, v in carrier.items()})


def metadata_to_dict(metadata: Iterable[tuple[str, str | bytes]] | None) -> dict[str, str]:
    """gRPC invocation metadata as a dict of text values (binary entries skipped)."""
    return {k.lower(): v for k, v in (metadata or ()) if isinstance(v, str)}


def clean_request_id(value: str | None) -> str:
    """The caller's request id when it is sane (printable ASCII, bounded: gRPC metadata carries it), else a new one."""
    if value and len(value) <= MAX_REQUEST_ID_LENGTH and value.isascii() and value.isprintable() and " " not in value:
        return value
    return uuid.uuid4().hex


def bind_request_id(value: str | None) -> str:
    """Sets (and returns) the request id for the current task; log records carry it."""
    request_id = clean_request_id(value)
    _request_id.set(request_id)
    return request_id


def current_request_id() -> str | None:
    return _request_id.get()


class RequestIdLogFilter(logging.Filter):
    """Adds `request_id` to every log record (\"-\" outside a request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = _request_id.get() or "-"
        return True


def configure_logging(level: str = "info") -> None:
    """Logs with the request id on each line, so one id greps a request through every hop."""
    handler = logging.StreamHandler()
    handler.addFilter(RequestIdLogFilter())
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # httpx logs every request at INFO; discovery and inventory poll engines each second, which would
    # bury the stack's own lines (and `macaron serve`'s banner). Its lines stay visible at debug.
    logging.getLogger("httpx").setLevel(max(root.level, logging.WARNING))
