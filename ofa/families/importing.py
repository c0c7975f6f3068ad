"""``ofa import``: an official once-for-all checkpoint of any registered family, as our supernet file.

The family is the one whose ``official_matches`` recognises the checkpoint's tensors; its importer
then infers the space from their shapes (with the given choice lists) and loads them with exact parity.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_type_hints

from ofa.families.family import Family, Space
from ofa.families.registry import family_names, get_family
from ofa.families.supernet_file import read_official_state
from ofa.utils.errors import OFAError
from ofa.utils.fields import field_label


@dataclass(frozen=True)
class ImportResult:
    """What ``ofa import`` wrote."""

    out: Path
    family: Family
    space: Space
    tensors: int
    meta: dict[str, Any]


def official_family(path: str | Path) -> Family:
    """The registered family whose official checkpoint ``path`` is; one line naming the file otherwise."""
    state = read_official_state(path)
    for name in family_names():
        if get_family(name).official_matches(state):
            return get_family(name)
    sample = ", ".join(sorted(map(str, state))[:3])
    raise OFAError(
        f"{path}: not an official once-for-all checkpoint of a known family ({', '.join(family_names())}; "
        f"found {sample}, ...)"
    )


def _check_integer_lists(family: Family, given: Mapping[str, Any]) -> None:
    """A fraction given where this family's setting takes integers (flags read numbers for every family) is
    one line naming the setting."""
    hints = get_type_hints(family.import_config)
    for name, values in given.items():
        if "tuple[int, ...]" in str(hints[name]) and any(not isinstance(v, int) for v in values or ()):
            label = field_label(family.import_config, name)
            raise OFAError(f"{label}: a {family.name} checkpoint takes integers, got {list(values)}")


def import_official_file(path: str | Path, out: str | Path, given: Mapping[str, Any]) -> ImportResult:
    """Import the official checkpoint at ``path`` with the settings ``given`` (import-config field -> value)
    and write our supernet file to ``out`` (atomically); a setting its family has not is an error."""
    family = official_family(path)
    known = {f.name for f in dataclasses.fields(family.import_config)}
    unknown = sorted(set(given) - known)
    if unknown:
        raise OFAError(f"{path}: a {family.name} checkpoint takes no {unknown[0]!r} setting (it takes {sorted(known)})")
    _check_integer_lists(family, given)
    net = family.official_import(path, family.import_config(**given))
    written = net.save(out, meta=net.meta)
    return ImportResult(written, family, net.space, len(net.state_dict()), net.meta)
