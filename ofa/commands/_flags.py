"""A verb's options from its config dataclass: each flag's name, type, default and help are the field's.

`add_flags` adds one option per field whose metadata has ``help`` (its flag: `ofa.utils.fields.flags_of`),
typed from the annotation: ``X | None`` as X, ``Literal[...]`` as choices, ``tuple[X, ...]`` as
``nargs="+"`` (or repeatable, metadata ``repeat``), ``bool`` as ``--x/--no-x`` (or, metadata ``invert``,
a flag that stores False, as ``--quiet`` for ``progress``). The default is the field's, so the config is
the one place it is written; a field without one makes a required option. `flag_values` reads the
options back as the config's keyword arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args, get_origin, get_type_hints

from ofa.utils.fields import flags_of

Changes = Mapping[str, Mapping[str, Any]]  # field -> argparse keywords that replace the derived ones (None: drop)


def option_fields(cls: type) -> list[dataclasses.Field]:
    """The fields of ``cls`` that are options (their metadata has ``help``)."""
    return [f for f in dataclasses.fields(cls) if "help" in f.metadata]


def add_flags(parser: Any, cls: type, changes: Changes | None = None, skip: Sequence[str] = ()) -> None:
    """One option per option field of ``cls`` (but those in ``skip``), its value stored under the field's name."""
    hints = get_type_hints(cls)
    for f in option_fields(cls):
        if f.name in skip:
            continue
        names = flags_of(cls, f.name)
        kwargs = {**_derived(f, hints[f.name], names[0]), **(changes or {}).get(f.name, {})}
        kwargs["help"] = _help(f.metadata["help"], None if kwargs.get("required") else kwargs.get("default"))
        if kwargs.get("choices") and "metavar" not in f.metadata:
            kwargs["metavar"] = None  # the usage lists the choices
        parser.add_argument(*names, dest=f.name, **{k: v for k, v in kwargs.items() if v is not None})


def flag_values(cls: type, args: argparse.Namespace) -> dict[str, Any]:
    """The option fields of ``cls`` as parsed (lists as tuples), ready for ``cls(**values, ...)``."""
    values = {f.name: getattr(args, f.name) for f in option_fields(cls) if hasattr(args, f.name)}
    return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else None


def _help(text: str, default: Any) -> str:
    """The field's help (argparse-escaped), and its default where that is a value worth printing."""
    shown = not isinstance(default, bool) and default not in (None, (), [])
    return text.replace("%", "%%") + (f" (default {default})" if shown else "")


def _derived(f: dataclasses.Field, tp: Any, flag: str) -> dict[str, Any]:
    """argparse keywords from a field's annotation, default and metadata (the metavar: its own, else the flag's)."""
    meta, default = f.metadata, _default(f)
    required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    kwargs: dict[str, Any] = {"default": default, "required": required or None}
    tp = _without_none(tp)
    if tp is bool:
        return {**kwargs, "action": "store_false" if meta.get("invert") else argparse.BooleanOptionalAction}
    kwargs["metavar"] = meta.get("metavar", flag.lstrip("-").upper().replace("-", "_"))
    if get_origin(tp) is tuple:
        tp = get_args(tp)[0]
        if meta.get("repeat"):
            kwargs.update(action="append", default=list(default or ()))
        else:
            kwargs["nargs"] = "+"
    if get_origin(tp) is Literal:
        kwargs["choices"] = get_args(tp)
        tp = type(get_args(tp)[0])
    return {**kwargs, "type": tp}


def _without_none(tp: Any) -> Any:
    """X for ``X | None``."""
    args = [a for a in get_args(tp) if a is not type(None)]
    return args[0] if type(None) in get_args(tp) and len(args) == 1 else tp
