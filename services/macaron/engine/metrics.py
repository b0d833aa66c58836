"""Prometheus metrics of the engine's HTTP server, under SGLang's metric and label names.

Dashboards and routers written for SGLang (`sglang:num_running_reqs`, `sglang:token_usage`,
`sglang:time_to_first_token_seconds`, ...) read the embedded engine unchanged. Two kinds:

- per-request counters and histograms, observed by the HTTP layer when a request ends
  (skipped for `log_metrics: false`, as SGLang skips its own health checks);
- gauges read from `engine.stats()` and `engine.memory_usage()` at scrape time, so they are
  never stale and need no background task.

Each app owns its registry (no process-global state), so several servers can live in one
process (tests, replicas behind one router).
"""

from __future__ import annotations

from typing import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from macaron.engine.protocol import EngineStats, MemoryUsage

ENGINE_TYPE = "unified"
"""SGLang's `engine_type` label outside prefill/decode disaggregation."""
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 120, 300, 600)
TOKEN_LATENCY_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.06, 0.08, 0.1, 0.2, 0.4, 1, 2, 4)


class _EngineGauges(Collector):
    """Scheduler gauges (SGLang's SchedulerMetricsCollector names), read live from the engine."""

    def __init__(self, labels: dict[str, str], stats: Callable[[], EngineStats], memory: Callable[[], MemoryUsage]):
        self._labels = {**labels, "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
        self._stats = stats
        self._memory = memory

    def _gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, labels=list(self._labels))
        family.add_metric(list(self._labels.values()), value)
        return family

    def collect(self) -> Iterator[GaugeMetricFamily]:
        s = self._stats()
        m = self._memory()
        total = max(s.kv_blocks_total, 1)
        yield self._gauge("sglang:num_running_reqs", "The number of running requests.", s.num_running)
        yield self._gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", s.num_queued)
        yield self._gauge("sglang:token_usage", "The token usage (KV blocks used / total).", s.kv_blocks_used / total)
        yield self._gauge("sglang:weight_memory_usage_gb", "Base weight memory in GB.", m.base_weight_bytes / 1e9)
        yield self._gauge("sglang:kv_cache_memory_usage_gb", "KV cache memory in GB.", m.kv_cache_bytes / 1e9)
        yield self._gauge(
            "macaron:lora_host_memory_bytes", "Host copies of every loaded LoRA adapter, in bytes.", m.adapter_host_bytes
        )
        yield self._gauge(
            "macaron:lora_pool_memory_bytes",
            "Device-side LoRA slot pool in bytes (0 on CPU: slots read the host copies).",
            m.adapter_pool_bytes,
        )
        lora = GaugeMetricFamily(
            "macaron:lora_adapter_bytes", "Bytes held by each loaded LoRA adapter.", labels=[*self._labels, "lora_name"]
        )
        for name, size in sorted(m.adapter_bytes.items()):
            lora.add_metric([*self._labels.values(), name], size)
        yield lora


class ServerMetrics:
    """The metrics of one engine server; `render()` is the body of GET /metrics."""

    def __init__(self, model_name: str, stats: Callable[[], EngineStats], memory: Callable[[], MemoryUsage]):
        self.registry = CollectorRegistry(auto_describe=True)
        self.labels = {"model_name": model_name, "engine_type": ENGINE_TYPE}
        names = list(self.labels)
        streaming = [*names, "is_streaming"]
        r = self.registry
        self.prompt_tokens = Counter("sglang:prompt_tokens", "Number of prefill tokens processed.", streaming, registry=r)
        self.generation_tokens = Counter(
            "sglang:generation_tokens", "Number of generation tokens processed.", streaming, registry=r
        )
        self.cached_tokens = Counter(
            "sglang:cached_tokens", "Number of cached prompt tokens by source.", [*names, "cache_source"], registry=r
        )
        self.num_requests = Counter("sglang:num_requests", "Number of requests processed.", streaming, registry=r)
        self.num_aborted = Counter("sglang:num_aborted_requests", "Number of requests aborted.", names, registry=r)
        self.ttft = Histogram(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            streaming,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            names,
            buckets=TOKEN_LATENCY_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "sglang:e2e_request_latency_seconds",
            "Histogram of end-to-end request latency in seconds.",
            streaming,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        r.register(_EngineGauges(self.labels, stats, memory))

    def observe_finished(
        self,
        *,
        stream: bool,
        prompt_tokens: int,
        completion_tokens: int,
        cached_tokens: int,
        e2e_latency: float,
        first_token_latency: float | None,
        aborted: bool,
    ) -> None:
        """Records one ended request (finished, aborted or disconnected)."""
        streaming = {**self.labels, "is_streaming": "true" if stream else "false"}
        self.prompt_tokens.labels(**streaming).inc(prompt_tokens)
        self.generation_tokens.labels(**streaming).inc(completion_tokens)
        if cached_tokens:
            self.cached_tokens.labels(**self.labels, cache_source="device").inc(cached_tokens)
        self.num_requests.labels(**streaming).inc()
        if aborted:
            self.num_aborted.labels(**self.labels).inc()
        self.e2e.labels(**streaming).observe(e2e_latency)
        if first_token_latency is not None:
            self.ttft.labels(**streaming).observe(first_token_latency)
            if completion_tokens > 1:
                per_token = (e2e_latency - first_token_latency) / (completion_tokens - 1)
                self.itl.labels(**self.labels).observe(max(per_token, 0.0))

    def render(self) -> bytes:
        """The Prometheus text exposition of this server's registry."""
        return generate_latest(self.registry)
