"""The L0 router's specialist classifier: which of chat, agent, code, ui serves a request.

    from macaron.router.classifier import SpecialistClassifier
    decision = SpecialistClassifier.load().classify("add a dark-mode toggle to my settings page")
    decision.specialist, decision.probabilities, decision.confidence, decision.escalated

A lexical fast path decides most requests in well under a millisecond; when it is unsure the
MiniLM embedding model decides (see decision.py). `macaron router train` rebuilds the shipped
artifact; `macaron router eval --data FILE.jsonl` measures it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from macaron.router.classifier.decision import RouteDecision, SpecialistClassifier
    from macaron.router.classifier.errors import ArtifactError, ClassificationInputError, ClassifierError
    from macaron.router.classifier.settings import ClassifierSettings

_EXPORTS = {
    "RouteDecision": "decision",
    "SpecialistClassifier": "decision",
    "ArtifactError": "errors",
    "ClassificationInputError": "errors",
    "ClassifierError": "errors",
    "ClassifierSettings": "settings",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    # Lazy: macaron.config imports the settings module, which must not pull numpy and the models.
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
