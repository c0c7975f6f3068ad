"""A config field's command-line flag, read from the field's metadata.

A config dataclass field is a command's option when its metadata has ``help``; ``flag`` gives its
flag (or flags, the first one is its name) when that is not ``--field-name``. This module is the one
place that maps a field to its flag: `ofa.commands._flags` builds the options with it, and the library's
errors name both the field and its flag with `field_label`, whether the value came from a flag, a
recipe key or a Python call.
"""

from __future__ import annotations

import dataclasses


def field_of(cls: type, name: str) -> dataclasses.Field:
    """Field ``name`` of dataclass ``cls`` (its default and metadata, to declare another field like it)."""
    return {f.name: f for f in dataclasses.fields(cls)}[name]


def flags_of(cls: type, name: str) -> tuple[str, ...]:
    """The flags of field ``name`` of ``cls``: its metadata's ``flag`` (a string or a tuple), else ``--name``."""
    flag = field_of(cls, name).metadata.get("flag", "--" + name.replace("_", "-"))
    return (flag,) if isinstance(flag, str) else tuple(flag)


def field_label(cls: type, name: str, section: str = "") -> str:
    """How an error names a field: ``section.name / --flag`` (the config key, and the flag that sets it)."""
    key = f"{section}.{name}" if section else name
    return f"{key} / {flags_of(cls, name)[0]}"
