"""Results of a load run: per-request records, their summary (table and JSON) and a latency plot.

Outcomes: `ok`; a clear error (`http_429`, `grpc_RESOURCE_EXHAUSTED`, `stream_error:<code>`,
`connect_error`: the server said no, quickly); `lost` (no answer by the request's deadline:
the one outcome a healthy stack never has).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

OK = "ok"
LOST = "lost"


@dataclass
class RequestResult:
    """One request: when it started (s since the run began), how it ended, how long it took."""

    session_id: str
    turn: int
    label: str
    start_s: float
    outcome: str = LOST
    specialist: str | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    retry_after_s: float | None = None
    detail: str = ""
    text: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome == OK

    @property
    def lost(self) -> bool:
        return self.outcome == LOST


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0-100) by linear interpolation; None without values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def _latency(values: list[float]) -> dict[str, float | None]:
    return {f"p{q}_ms": (None if (v := percentile(values, q)) is None else round(v * 1000, 1)) for q in (50, 95, 99)}


@dataclass
class LoadReport:
    """Everything a run measured; `summary()` is the JSON, `table()` the printed form."""

    results: list[RequestResult]
    elapsed_s: float
    mode: str
    transport: str
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def sent(self) -> int:
        return len(self.results)

    @property
    def completed(self) -> int:
        return sum(r.ok for r in self.results)

    @property
    def lost(self) -> int:
        return sum(r.lost for r in self.results)

    @property
    def clear_errors(self) -> int:
        return self.sent - self.completed - self.lost

    def errors(self) -> dict[str, int]:
        """Every outcome other than ok, with its count (lost included)."""
        return dict(sorted(Counter(r.outcome for r in self.results if not r.ok).items()))

    def summary(self) -> dict[str, Any]:
        ok = [r for r in self.results if r.ok]
        specialists = sorted({r.specialist or "none" for r in ok})
        per_specialist = {}
        for name in specialists:
            mine = [r for r in ok if (r.specialist or "none") == name]
            per_specialist[name] = {
                "completed": len(mine),
                "ttft": _latency([r.ttft_s for r in mine if r.ttft_s is not None]),
                "e2e": _latency([r.e2e_s for r in mine if r.e2e_s is not None]),
            }
        prompt_tokens = sum(r.prompt_tokens for r in ok)
        cached_tokens = sum(r.cached_tokens for r in ok)
        route_mix = Counter(r.specialist or "none" for r in ok)
        label_hits = sum(r.specialist == r.label for r in ok)
        return {
            "mode": self.mode,
            "transport": self.transport,
            "elapsed_s": round(self.elapsed_s, 3),
            "sent": self.sent,
            "completed": self.completed,
            "clear_errors": self.clear_errors,
            "lost": self.lost,
            "requests_per_s": round(self.completed / self.elapsed_s, 3) if self.elapsed_s > 0 else 0.0,
            "ttft": _latency([r.ttft_s for r in ok if r.ttft_s is not None]),
            "e2e": _latency([r.e2e_s for r in ok if r.e2e_s is not None]),
            "per_specialist": per_specialist,
            "route_mix": {k: round(v / len(ok), 3) for k, v in sorted(route_mix.items())} if ok else {},
            "route_matches_label": round(label_hits / len(ok), 3) if ok else None,
            "prompt_tokens": prompt_tokens,
            "cached_tokens": cached_tokens,
            "cached_token_share": round(cached_tokens / prompt_tokens, 3) if prompt_tokens else 0.0,
            "errors": self.errors(),
            **self.meta,
        }

    def table(self) -> str:
        """A plain-text table: one line per specialist, then totals, route mix and errors."""
        s = self.summary()
        head = f"{'specialist':<10} {'done':>6} {'ttft p50':>9} {'p95':>8} {'p99':>8} {'e2e p50':>9} {'p95':>8} {'p99':>8}  (ms)"
        lines = [head, "-" * len(head)]

        def row(name: str, done: int, ttft: dict[str, Any], e2e: dict[str, Any]) -> str:
            cell = lambda v: f"{v:.0f}" if v is not None else "-"  # noqa: E731
            return (f"{name:<10} {done:>6} {cell(ttft['p50_ms']):>9} {cell(ttft['p95_ms']):>8} {cell(ttft['p99_ms']):>8} "
                    f"{cell(e2e['p50_ms']):>9} {cell(e2e['p95_ms']):>8} {cell(e2e['p99_ms']):>8}")

        for name, stats in s["per_specialist"].items():
            lines.append(row(name, stats["completed"], stats["ttft"], stats["e2e"]))
        lines.append(row("all", s["completed"], s["ttft"], s["e2e"]))
        lines.append("")
        lines.append(f"{s['mode']} over {s['transport']}: {s['sent']} sent, {s['completed']} completed, "
                     f"{s['clear_errors']} clear errors, {s['lost']} lost in {s['elapsed_s']:.1f} s "
                     f"({s['requests_per_s']:.2f} req/s)")
        mix = ", ".join(f"{k} {v:.0%}" for k, v in s["route_mix"].items()) or "-"
        lines.append(f"route mix: {mix}; cached tokens {s['cached_token_share']:.0%} of {s['prompt_tokens']} prompt tokens")
        if s["errors"]:
            lines.append("errors: " + ", ".join(f"{k} x{v}" for k, v in s["errors"].items()))
        return "\n".join(lines)

    def write_json(self, path: str | Path, *, with_requests: bool = True) -> Path:
        """The summary (and, by default, every request without its text) as one JSON file."""
        body: dict[str, Any] = {"summary": self.summary()}
        if with_requests:
            body["requests"] = [{k: v for k, v in asdict(r).items() if k != "text"} for r in self.results]
        out = Path(path)
        out.write_text(json.dumps(body, indent=2))
        return out

    def plot(self, path: str | Path) -> Path:
        """Latency over time as a PNG (end-to-end of each completed request, errors on the time axis)."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            raise RuntimeError("plotting needs matplotlib: pip install 'macaron-serve[dev]' (or matplotlib)") from None
        fig, ax = plt.subplots(figsize=(9, 4))
        for name in sorted({r.specialist or "none" for r in self.results if r.ok}):
            mine = [r for r in self.results if r.ok and (r.specialist or "none") == name]
            ax.scatter([r.start_s for r in mine], [(r.e2e_s or 0) * 1000 for r in mine], s=8, label=name)
        failed = [r for r in self.results if not r.ok]
        if failed:
            ax.scatter([r.start_s for r in failed], [0] * len(failed), marker="x", color="red", label="error / lost")
        ax.set_xlabel("request start (s)")
        ax.set_ylabel("end-to-end latency (ms)")
        ax.set_title(f"{self.mode} over {self.transport}")
        ax.legend(loc="upper left", fontsize="small")
        fig.tight_layout()
        out = Path(path)
        fig.savefig(out, dpi=100)
        plt.close(fig)
        return out
