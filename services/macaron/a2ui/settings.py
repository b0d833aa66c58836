"""Settings of the A2UI output of the `ui` specialist (`specialists.a2ui`): the bounded grammar.

Importing this module stays light (pydantic only): the configuration imports it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_COMPONENTS: tuple[str, ...] = (
    "Column", "Row", "Card", "Text", "Divider", "Button", "TextField", "CheckBox",
)


class A2uiSettings(BaseModel):
    """How far constrained decoding may go: the catalog's kept components and the bounds on sizes.

    Together they fix the largest answer the grammar admits (`macaron.a2ui.max_output_bytes`); with
    the defaults that is 4,033 bytes, so the `ui` profile's default budget of 4,096 new tokens always
    completes an answer (a token is at least one byte).
    """

    model_config = ConfigDict(extra="forbid")

    components: list[str] = Field(
        default_factory=lambda: list(DEFAULT_COMPONENTS),
        description="Components of the A2UI v0.9 basic catalog the ui grammar keeps (the SDK prunes the rest); "
        "Column must be kept (the root is a Column).",
    )
    max_components: int = Field(
        12, ge=2, le=64, description="Most components in one answer (the root Column included)."
    )
    max_children: int = Field(6, ge=1, le=32, description="Most children of one Column or Row.")
    max_text_chars: int = Field(
        40, ge=1, le=200, description="Longest literal text (Text, labels) in characters; each is at most 3 UTF-8 bytes."
    )
    max_id_chars: int = Field(16, ge=4, le=64, description="Longest component id or action name, in characters.")
    prune: bool = Field(
        True,
        description="Before the SDK validates an answer, keep only the root's tree: drop repeated ids, references "
        "to missing components and components the root does not reach (a small model adds such strays).",
    )
