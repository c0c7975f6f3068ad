"""The supernet families, registered in one place, and the lookups every stage makes through them.

A space file says its family by a ``family:`` key; a space without one is mbv3 (a format rule:
every mbv3 recipe, checkpoint, table, arch file and fingerprint written before families existed
reads as it did). An arch mapping of another family carries ``"family": "<name>"`` too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ofa.families.family import Family
from ofa.families.mbv3.family import MBV3
from ofa.families.proxyless.family import PROXYLESS
from ofa.families.resnet.family import RESNET
from ofa.families.supernet_file import read_record, read_space_dict
from ofa.utils.errors import OFAError, SpaceError
from ofa.utils.io import read_text

DEFAULT_FAMILY = "mbv3"  # the family of a space or arch mapping without a family key
_FAMILIES: dict[str, Family] = {}


def register(family: Family) -> Family:
    """Add ``family`` to the registry (its name must be new)."""
    if family.name in _FAMILIES:
        raise OFAError(f"family {family.name!r} is registered twice")
    _FAMILIES[family.name] = family
    return family


def unregister(name: str) -> Family:
    """Remove the family called ``name``: one registered at run time (a test's) stops being seen when it is done."""
    family = get_family(name)
    del _FAMILIES[name]
    return family


for _family in (MBV3, PROXYLESS, RESNET):  # the known families
    register(_family)


def family_names() -> tuple[str, ...]:
    return tuple(_FAMILIES)


def get_family(name: str, source: str = "family") -> Family:
    """The family called ``name``; an unknown one is a one-line error listing the known ones."""
    family = _FAMILIES.get(name) if isinstance(name, str) else None
    if family is None:
        raise SpaceError(f"{source}: unknown family {name!r} (known: {', '.join(family_names())})")
    return family


def family_of(space: Any) -> Family:
    """The family whose space type ``space`` is."""
    for family in _FAMILIES.values():
        if isinstance(space, family.space_type):
            return family
    raise OFAError(f"{type(space).__name__} is not the space of a registered family ({', '.join(family_names())})")


def is_space(obj: Any) -> bool:
    """Whether ``obj`` is the space of a registered family."""
    return any(isinstance(obj, f.space_type) for f in _FAMILIES.values())


def layout_of(space: Any) -> Any:
    """The gene layout of ``space`` (``ofa.families.genes.GeneLayoutBase``; cached by the family)."""
    return family_of(space).layout(space)


def space_from_dict(d: Mapping[str, Any], source: str = "space") -> Any:
    """A space from its mapping (a recipe's ``space:``, a checkpoint's or table's), by its ``family:`` key.

    The family's ``from_dict`` gets the whole mapping (mbv3's without the key: its format has none).
    """
    if not isinstance(d, Mapping):
        raise SpaceError(f"{source}: expected a mapping")
    family = get_family(d.get("family", DEFAULT_FAMILY), f"{source}.family")
    return family.space_type.from_dict(_without_default_family(d), source)


def arch_from_dict(space: Any, d: Mapping[str, Any], source: str = "arch") -> Any:
    """An arch of ``space``'s family from its mapping; an arch of another family is refused, naming both."""
    family = family_of(space)
    if not isinstance(d, Mapping):
        raise SpaceError(f"{source}: expected a JSON object (an arch of family {family.name})")
    named = d.get("family", DEFAULT_FAMILY)
    if named != family.name:
        raise SpaceError(f"{source}: an arch of family {named!r}, but the space is of family {family.name!r}")
    return family.arch_type.from_dict(_without_default_family(d), source)


def _without_default_family(d: Mapping[str, Any]) -> Mapping[str, Any]:
    return {k: v for k, v in d.items() if k != "family"} if d.get("family", DEFAULT_FAMILY) == DEFAULT_FAMILY else d


def arch_from_any(space: Any, d: Any, source: str = "arch") -> Any:
    """An arch mapping of ours, or an official subnet config of ``space``'s family (it has ``d``, not ``depths``)."""
    if isinstance(d, Mapping) and "d" in d and "depths" not in d:
        return family_of(space).official_arch(space, d, source)
    return arch_from_dict(space, d, source)


def load_arch(space: Any, path: str | Path) -> Any:
    """Read an arch file of ``space``'s family, ours or an official subnet config (`arch_from_any`); a missing
    or malformed file is one line naming it."""
    path = Path(path)
    if not path.is_file():
        raise SpaceError(f"{path}: arch file not found")
    text = read_text(path, "arch file")
    return arch_from_any(space, _json_object(text, str(path)), str(path))


def load_supernet(path: str | Path) -> Any:
    """A supernet file or training checkpoint of any family (its space's ``family:`` key says which)."""
    record, state = read_record(path)
    space = space_from_dict(record["space"], f"{path}:space")
    return family_of(space).supernet_type.from_record(record, state, str(path))


def read_supernet_space(path: str | Path) -> Any:
    """The space stored in a supernet file or training checkpoint (to build a recipe around it)."""
    return space_from_dict(read_space_dict(path), f"{path}:space")


def _json_object(text: str, source: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpaceError(f"{source}: invalid JSON: {exc}") from None
