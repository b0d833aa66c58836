"""The promotion gate: before a canary takes traffic, its evaluation score must not be worse than stable's.

A scorer is any callable `scorer(EvalTarget) -> float` (or an awaitable of one), higher is
better, e.g. the share of an evaluation set answered right, run against one replica with the
version's `lora_path`. `router.lifecycle.gate_scorer` names one as `module:function` (the
training package's `adapters eval` plugs in there); tests pass a function directly.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Union


@dataclass(frozen=True, slots=True)
class EvalTarget:
    """What a scorer evaluates: one version of one specialist, served by `replica` as `lora_path`."""

    specialist: str
    version: str
    lora_path: str
    replica: str


Scorer = Callable[[EvalTarget], Union[float, Awaitable[float]]]


@dataclass(frozen=True, slots=True)
class GateResult:
    passed: bool
    candidate_score: float
    stable_score: float
    margin: float

    @property
    def reason(self) -> str:
        verdict = "passed" if self.passed else "refused"
        return (f"gate {verdict}: score {self.candidate_score:.4f} vs stable {self.stable_score:.4f} "
                f"(margin {self.margin:.4f})")


class GateRefusedError(Exception):
    """The candidate scored worse than stable by more than the margin; it takes no traffic."""

    def __init__(self, result: GateResult) -> None:
        super().__init__(result.reason + ": fix the adapter (or raise router.lifecycle.gate_margin) and try again")
        self.result = result


def load_scorer(spec: str) -> Scorer:
    """`module:function` → the function (ValueError with the expected form otherwise)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"gate_scorer {spec!r}: write it as module:function")
    return getattr(importlib.import_module(module_name), attr)


class PromotionGate:
    """Scores candidate and stable with one scorer; refuses the candidate past the margin."""

    def __init__(self, scorer: Scorer, margin: float) -> None:
        self.scorer = scorer
        self.margin = margin

    async def _score(self, target: EvalTarget) -> float:
        if inspect.iscoroutinefunction(self.scorer):
            return float(await self.scorer(target))
        result: Any = await asyncio.to_thread(self.scorer, target)
        if inspect.isawaitable(result):
            result = await result
        return float(result)

    async def evaluate(self, candidate: EvalTarget, stable: EvalTarget) -> GateResult:
        cand, base = await asyncio.gather(self._score(candidate), self._score(stable))
        return GateResult(cand >= base - self.margin, cand, base, self.margin)
