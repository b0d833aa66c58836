"""Scorers of placement: each gives every replica a score in [0, 1]."""

from macaron.router.placement.scorers.adapter import AdapterScorer
from macaron.router.placement.scorers.home import PrefixHomeScorer
from macaron.router.placement.scorers.load import LoadScorer
from macaron.router.placement.scorers.prefix import PrefixScorer
from macaron.router.placement.scorers.session import SessionScorer
from macaron.router.placement.scorers.spread import SessionSpreadScorer

__all__ = ["AdapterScorer", "LoadScorer", "PrefixHomeScorer", "PrefixScorer", "SessionScorer", "SessionSpreadScorer"]
