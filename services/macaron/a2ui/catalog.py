"""The A2UI v0.9 basic catalog as the `ui` specialist uses it: pruned by the official SDK.

The SDK's `ComponentPruningTransformer` keeps only the configured components and
`FunctionPruningTransformer` drops every client-side function (the grammar never writes calls),
so the catalog that validates answers is exactly the one the grammar is derived from.
"""

from __future__ import annotations

import functools

from a2ui.catalog_transformers import ComponentPruningTransformer, FunctionPruningTransformer
from a2ui.core import CatalogApi
from a2ui.core.basic_catalog import BasicCatalog

PROTOCOL_VERSION = "v0.9"
SURFACE_ID = "main"


@functools.cache
def basic_catalog() -> CatalogApi:
    """The full basic catalog of A2UI v0.9 (what renderers such as @a2ui/lit implement)."""
    return BasicCatalog(PROTOCOL_VERSION)


def catalog_id() -> str:
    """The basic catalog's id, the `catalogId` every createSurface names."""
    return basic_catalog().catalog_id


@functools.cache
def _pruned(components: tuple[str, ...]) -> CatalogApi:
    full = basic_catalog()
    unknown = sorted(set(components) - set(full.components))
    if unknown:
        raise ValueError(
            f"the A2UI basic catalog has no component {', '.join(unknown)}; "
            f"choose from {', '.join(full.components)} (specialists.a2ui.components)"
        )
    kept = ComponentPruningTransformer(list(components)).transform(full)
    return FunctionPruningTransformer([]).transform(kept)


def pruned_catalog(components: tuple[str, ...] | list[str]) -> CatalogApi:
    """The basic catalog with only `components` and no functions; ValueError names unknown ones."""
    return _pruned(tuple(components))
