"""What a check's parameters declare and accept, as preflight.core.config reads a value against them:
each field's type hint and its metadata (kind, minimum, choices)."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from preflight.core.check import Check


def _param_fields(check: type[Check]) -> dict[str, Any]:
    if not dataclasses.is_dataclass(check.Params):
        return {}
    hints = typing.get_type_hints(check.Params)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(check.Params)}


def param_specs(check: type[Check]) -> dict[str, Any]:
    """Parameter name -> what its field declares (kind, minimum, choices, ...; empty when nothing)."""
    if not dataclasses.is_dataclass(check.Params):
        return {}
    return {f.name: f.metadata for f in dataclasses.fields(check.Params)}


def _matches(value: Any, hint: Any) -> bool:
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin in (list, tuple):
        args = typing.get_args(hint)
        return isinstance(value, list) and all(_matches(v, args[0]) for v in value) if args else isinstance(value, list)
    if origin is dict:
        return isinstance(value, dict)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(hint) if a is not type(None))
    if typing.get_origin(hint) is list:
        args = typing.get_args(hint)
        return f"a list of {_type_name(args[0])}" if args else "a list"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(hint, str(hint))
