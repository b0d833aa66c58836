"""argparse flags generated from a pydantic model, as SGLang derives its flags from ServerArgs.

Every field becomes `--field-name`; the help text is the field's description; `bool` fields
become `--flag/--no-flag`; `list[...]` fields take several values; `Literal` gives choices.
Only flags the user typed override the model's defaults (argparse.SUPPRESS), so YAML and
environment settings keep working underneath the command line.
"""

from __future__ import annotations

import argparse
import typing
from typing import Any, Literal

from pydantic import BaseModel


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _unwrap_optional(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def add_model_args(parser: argparse.ArgumentParser, model: type[BaseModel]) -> None:
    """Adds one flag per field of `model` to `parser` (defaults suppressed)."""
    for name, field in model.model_fields.items():
        annotation = _unwrap_optional(field.annotation)
        origin = typing.get_origin(annotation)
        help_text = (field.description or "").replace("%", "%%")
        default = field.get_default(call_default_factory=True)
        if default is not None and not isinstance(default, BaseModel):
            help_text += f" (default: {default!r})".replace("%", "%%")
        kwargs: dict[str, Any] = {"default": argparse.SUPPRESS, "help": help_text, "dest": name}
        if annotation is bool:
            parser.add_argument(_flag(name), action=argparse.BooleanOptionalAction, **kwargs)
            continue
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            continue  # nested sections are set through YAML or the environment
        if origin is Literal:
            kwargs["choices"] = list(typing.get_args(annotation))
        elif origin in (list, tuple):
            item = typing.get_args(annotation)[0] if typing.get_args(annotation) else str
            kwargs["nargs"] = "*"
            kwargs["type"] = item if item in (int, float, str) else str
        elif origin is dict:
            continue
        elif annotation in (int, float, str):
            kwargs["type"] = annotation
        else:
            kwargs["type"] = str
        parser.add_argument(_flag(name), **kwargs)


def explicit_values(namespace: argparse.Namespace, model: type[BaseModel]) -> dict[str, Any]:
    """The fields of `model` that were given on the command line."""
    return {k: v for k, v in vars(namespace).items() if k in model.model_fields}
