"""Typed config sections from plain YAML mappings: every key and type checked, errors name the key.

A section is a frozen dataclass whose type hints are the schema; `parse_section` walks them, so
adding a recipe option is adding one annotated field with a default. ``--set key=value``
overrides (`apply_overrides`) edit the plain mapping before it is parsed, and `differences`
compares two resolved configs key by key (what a resumed run may and may not change).
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Iterable, Mapping
from typing import Any, Literal, NamedTuple, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml

from ofa.utils.errors import OFAError

T = TypeVar("T")


class ConfigError(OFAError):
    """A recipe value that does not fit its schema; the message is ``where: problem``."""


def _describe(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        inner = [a for a in get_args(tp) if a is not type(None)]
        return " or ".join(_describe(a) for a in inner) + " or null"
    if origin is tuple:
        return f"a list of {_describe(get_args(tp)[0])}s"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(tp, str(tp))


def _coerce(tp: Any, value: Any, where: str) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _coerce(inner[0], value, where)
        raise TypeError(f"unsupported union {tp}")
    if origin is Literal:
        if value not in get_args(tp):
            raise ConfigError(f"{where}: {value!r} is not {_describe(tp)}")
        return value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected {_describe(tp)}, got {value!r}")
        return tuple(_coerce(get_args(tp)[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if dataclasses.is_dataclass(tp):
        return parse_section(tp, value, where)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is float:
        # YAML 1.1 reads "3e-5" (no dot) as a string: accept it, it is what the user meant.
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    raise TypeError(f"unsupported schema type {tp}")


def _key(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def parse_section(cls: type[T], value: Any, where: str) -> T:
    """Build dataclass ``cls`` from a mapping; unknown keys, missing required keys and bad types raise."""
    return cls(**parse_fields(cls, value, where))


def parse_fields(cls: type, value: Any, where: str, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The checked keyword arguments of ``cls`` found in ``value`` (fields in ``skip`` excluded)."""
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {value!r}")
    hints = get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if f.init and f.name not in skip]
    known = [f.name for f in fields]
    for key in value:
        if key not in known:
            raise ConfigError(f"{_key(where, key)}: unknown key (allowed: {', '.join(known)})")
    kwargs = {}
    for f in fields:
        if f.name in value:
            kwargs[f.name] = _coerce(hints[f.name], value[f.name], _key(where, f.name))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{_key(where, f.name)}: missing (required)")
    return kwargs


def section_to_dict(section: Any) -> Any:
    """Plain YAML/JSON/torch-safe values: dataclasses to dicts, tuples to lists."""
    if dataclasses.is_dataclass(section) and not isinstance(section, type):
        return {f.name: section_to_dict(getattr(section, f.name)) for f in dataclasses.fields(section)}
    if isinstance(section, list | tuple):
        return [section_to_dict(v) for v in section]
    if isinstance(section, Mapping):
        return {k: section_to_dict(v) for k, v in section.items()}
    return section


def recipe_to_dict(recipe: Any, own: Iterable[str]) -> dict[str, Any]:
    """A recipe dataclass's fields as plain values (its ``source`` left out); the sections named in ``own`` by
    their own ``to_dict``, since they say how they are written (e.g. later keys left out at their defaults)."""
    own = set(own)
    return {
        f.name: getattr(recipe, f.name).to_dict() if f.name in own else section_to_dict(getattr(recipe, f.name))
        for f in dataclasses.fields(recipe)
        if f.name != "source"
    }


def without_later_defaults(plain: dict[str, Any], section: type, later: Iterable[str]) -> dict[str, Any]:
    """``plain`` (a section's `section_to_dict`) without each ``later`` key that holds ``section``'s default: keys
    added after runs were cached under a recipe's digest, so a recipe that does not set them keeps that digest."""
    for key in later:
        if plain[key] == getattr(section, key):
            del plain[key]
    return plain


def apply_overrides(raw: dict[str, Any], overrides: Iterable[str], source: str) -> dict[str, Any]:
    """``--set data.batch_size=32``, ``--set phases.kernel.epochs=2`` (a list entry by name or index).

    Values are YAML; the mapping is edited in place (nested mappings and lists are copied on
    the way down, so the caller's nested objects are untouched) and returned. Raises
    `OFAError` for a malformed item or a path that does not exist in ``source``.
    """
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise OFAError(f"--set {item!r}: expected KEY=VALUE, e.g. data.batch_size=32")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            raise OFAError(f"--set {item!r}: the value is not valid YAML") from None
        _set_path(raw, key, value, source)
    return raw


def _set_path(raw: dict[str, Any], key: str, value: Any, source: str) -> None:
    node: Any = raw
    parts = key.split(".")
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        if isinstance(node, list):
            index = _list_index(node, part)
            if index is None:
                raise OFAError(f"--set {key}: {'.'.join(parts[: depth + 1])}: no such list entry in {source}")
        elif isinstance(node, dict):
            index = part
        else:
            raise OFAError(f"--set {key}: {'.'.join(parts[:depth])} is not a mapping or list in {source}")
        if last:
            node[index] = value
            return
        child = node[index] if isinstance(node, list) else node.get(part)
        # Copy containers on the way down; a missing or scalar mapping entry becomes a new mapping.
        if isinstance(child, list):
            node[index] = list(child)
        elif isinstance(child, Mapping):
            node[index] = dict(child)
        elif isinstance(node, dict):
            node[index] = {}
        node = node[index]


def _list_index(items: list, part: str) -> int | None:
    if part.lstrip("-").isdigit():
        i = int(part)
        return i if -len(items) <= i < len(items) else None
    for i, item in enumerate(items):
        if isinstance(item, Mapping) and item.get("name") == part:
            return i
    return None


class _Absent:
    def __repr__(self) -> str:
        return "(absent)"


ABSENT: Any = _Absent()  # the value of a key one of the compared configs does not have


class Difference(NamedTuple):
    """One key where two configs differ: ``key`` reads ``data.batch_size`` or ``phases[1].lr``."""

    key: str
    old: Any
    new: Any


def differences(old: Any, new: Any, where: str = "") -> list[Difference]:
    """Every leaf where two plain config trees (as `section_to_dict` writes them) differ, in key order.

    A list of a different length is one difference at the list itself.
    """
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        keys = [*old, *(k for k in new if k not in old)]
        return [d for k in keys for d in differences(old.get(k, ABSENT), new.get(k, ABSENT), _key(where, str(k)))]
    if isinstance(old, list | tuple) and isinstance(new, list | tuple) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in differences(a, b, f"{where}[{i}]")]
    return [] if old == new else [Difference(where, old, new)]
