"""A recipe's ``space:`` mapping for an OFA-ResNet space -> checked constructor arguments (one-line ``SpaceError``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ofa.utils.errors import SpaceError

PRESETS = ("ofa_resnet50",)
FLOAT_TUPLES = ("widths", "expands")
INT_TUPLES = ("depths", "resolutions", "stage_widths", "base_depths", "strides")


def parse_fields(d: Any, source: str, names: Sequence[str]) -> dict[str, Any]:
    """Constructor arguments of ``ResNetSpace`` from ``d`` (keys ``family``, ``preset`` and the field ``names``)."""
    if not isinstance(d, Mapping):
        raise SpaceError(f"{source}: expected a mapping")
    d = dict(d)
    family = d.pop("family", "resnet")
    if family != "resnet":
        raise SpaceError(f"{source}.family: {family!r} is not 'resnet'")
    preset = d.pop("preset", None)
    if preset not in (None, *PRESETS):
        raise SpaceError(f"{source}.preset: unknown preset {preset!r} (allowed: {', '.join(PRESETS)})")
    unknown = sorted(set(d) - set(names))
    if unknown:
        raise SpaceError(f"{source}.{unknown[0]}: unknown key (allowed: family, preset, {', '.join(names)})")
    return {name: _value(name, value, f"{source}.{name}") for name, value in d.items()}


def _value(name: str, value: Any, source: str) -> Any:
    if name in FLOAT_TUPLES:
        if not isinstance(value, list | tuple) or not all(_is_number(v) for v in value):
            raise SpaceError(f"{source}: expected a list of numbers, got {value!r}")
        return tuple(float(v) for v in value)
    if name in INT_TUPLES:
        return _int_tuple(value, source)
    if name == "stem_pool":
        if not isinstance(value, bool):
            raise SpaceError(f"{source}: expected true or false, got {value!r}")
        return value
    if name == "dropout":
        if not _is_number(value):
            raise SpaceError(f"{source}: expected a number, got {value!r}")
        return float(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise SpaceError(f"{source}: expected an integer, got {value!r}")
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _int_tuple(value: Any, source: str) -> tuple[int, ...]:
    if isinstance(value, Mapping) and set(value) <= {"start", "stop", "step"}:
        try:
            return tuple(range(int(value["start"]), int(value["stop"]) + 1, int(value.get("step", 1))))
        except (KeyError, TypeError, ValueError):
            raise SpaceError(f"{source}: range needs integer start, stop and optional step") from None
    if not isinstance(value, list | tuple) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise SpaceError(f"{source}: expected a list of integers, got {value!r}")
    return tuple(value)
