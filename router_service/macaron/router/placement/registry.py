"""Plugins by name, and the three policies as profiles built from them.

`register(name, factory)` makes a plugin available by name (as llm-d's `plugin.Register`);
`build_profile(policy, settings)` wires one of the policies:

- `round_robin`: healthy filter, no scorer, round-robin picker.
- `least_load`: healthy filter, load scorer, max-score picker.
- `prefix_affinity`: healthy filter, prefix + prefix_home + load + session + spread + adapter scorers
  (RouterSettings.weights; spread groups by RouterSettings.head_group), max-score picker, balance guard (RouterSettings.balance_*).
"""

from __future__ import annotations

from typing import Any, Callable

from macaron.router.placement.filters import HealthyFilter
from macaron.router.placement.pickers import BalanceGuard, MaxScorePicker, RoundRobinPicker
from macaron.router.placement.profile import PlacementProfile, WeightedScorer
from macaron.router.placement.scorers import (
    AdapterScorer,
    LoadScorer,
    PrefixHomeScorer,
    PrefixScorer,
    SessionScorer,
    SessionSpreadScorer,
)
from macaron.router.settings import RouterSettings

PLUGINS: dict[str, Callable[[], Any]] = {}


def register(name: str, factory: Callable[[], Any]) -> None:
    """Makes a filter, scorer or picker available by name."""
    PLUGINS[name] = factory


def plugin(name: str) -> Any:
    try:
        return PLUGINS[name]()
    except KeyError:
        raise KeyError(f"unknown placement plugin {name!r}; known: {', '.join(sorted(PLUGINS))}") from None


for _name, _factory in {
    "healthy": HealthyFilter,
    "prefix": PrefixScorer,
    "prefix_home": PrefixHomeScorer,
    "load": LoadScorer,
    "session": SessionScorer,
    "spread": SessionSpreadScorer,
    "adapter": AdapterScorer,
    "max_score": MaxScorePicker,
    "round_robin": RoundRobinPicker,
}.items():
    register(_name, _factory)


def build_profile(policy: str, settings: RouterSettings) -> PlacementProfile:
    """The profile of one policy (round_robin, least_load, prefix_affinity)."""
    if policy == "round_robin":
        return PlacementProfile(policy, [plugin("healthy")], [], plugin("round_robin"))
    if policy == "least_load":
        return PlacementProfile(policy, [plugin("healthy")], [WeightedScorer(plugin("load"), 1.0)], plugin("max_score"))
    if policy == "prefix_affinity":
        w = settings.weights
        own = {"spread": lambda: SessionSpreadScorer(settings.head_group),
               "prefix_home": lambda: PrefixHomeScorer(min(1.0, settings.head_group.min_share))}
        scorers = [WeightedScorer(own[name]() if name in own else plugin(name), weight)
                   for name, weight in (("prefix", w.prefix), ("prefix_home", w.home), ("load", w.load),
                                        ("session", w.session), ("spread", w.spread), ("adapter", w.adapter)) if weight > 0]
        guard = BalanceGuard(settings.balance_abs_threshold, settings.balance_rel_threshold)
        return PlacementProfile(policy, [plugin("healthy")], scorers, plugin("max_score"), guard)
    raise ValueError(f"unknown placement policy {policy!r}; choose round_robin, least_load or prefix_affinity")
