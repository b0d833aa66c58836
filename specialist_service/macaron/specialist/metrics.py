"""A specialist's Prometheus metrics, on a registry of its own (four profiles may share a process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class SpecialistMetrics:
    """Calls by status code, streams in flight, time to first chunk, tokens."""

    def __init__(self, specialist: str, registry: CollectorRegistry | None = None) -> None:
        self.specialist = specialist
        r = self.registry = registry or CollectorRegistry()
        self.requests = Counter(
            "macaron_specialist_requests_total", "Finished Generate calls by gRPC status code.",
            ["specialist", "code"], registry=r,
        )
        self.in_flight = Gauge(
            "macaron_specialist_in_flight", "Generate streams being served now.", ["specialist"], registry=r
        )
        self.ttft = Histogram(
            "macaron_specialist_time_to_first_chunk_seconds", "From the call's arrival to its first text or tool chunk.",
            ["specialist"], buckets=TTFT_BUCKETS, registry=r,
        )
        self.routed_prompts = Counter(
            "macaron_specialist_routed_prompts_total",
            "Requests that came with the router's token ids of their prompt: used as they are, or rendered again "
            "here (the router rendered with another template, tokenizer or system prompt).",
            ["specialist", "outcome"], registry=r,
        )
        self.prompt_tokens = Counter(
            "macaron_specialist_prompt_tokens_total", "Prompt tokens sent to the engine.", ["specialist"], registry=r
        )
        self.cached_tokens = Counter(
            "macaron_specialist_cached_tokens_total", "Prompt tokens the engine served from its prefix cache.",
            ["specialist"], registry=r,
        )
        self.completion_tokens = Counter(
            "macaron_specialist_completion_tokens_total", "Tokens generated.", ["specialist"], registry=r
        )
