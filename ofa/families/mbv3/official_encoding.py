"""The official once-for-all subnet encoding ``{"ks", "e", "d"}`` (+ resolution) to and from ours.

The official code (mit-han-lab/once-for-all) names a subnet by ``set_active_subnet(ks=..., e=...,
d=...)``: slot ``i`` of ``ks``/``e`` is block ``i % max_depth`` of stage ``i // max_depth``, exactly
our slot layout, so the conversion is a checked copy. Published specialized configs give the
resolution as ``"r": [224]``; both that and a plain int are accepted. This module only parses
values: `Arch.from_ofa_config` / `Arch.to_ofa_config` wrap it (it imports no `ofa.families.mbv3.arch`, so
`ofa.families.mbv3.arch` can use it without a cycle).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ofa.utils.errors import SpaceError

Fields = tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]  # resolution, depths, kernels, expands


def _int(value: Any, where: str) -> int:
    """An integer, also from an integral float (official JSON configs sometimes write ``6.0``)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise SpaceError(f"{where}: expected an integer, got {value!r}")
    return int(value)


def _ints(config: Mapping[str, Any], key: str, source: str) -> tuple[int, ...]:
    if key not in config:
        raise SpaceError(f"{source}: missing field {key!r} (official subnet configs have ks, e, d)")
    value = config[key]
    if not isinstance(value, list | tuple) or not value:
        raise SpaceError(f"{source}.{key}: expected a non-empty list of integers, got {value!r}")
    return tuple(_int(v, f"{source}.{key}[{i}]") for i, v in enumerate(value))


def parse_resolution(resolution: Any, source: str) -> int:
    """``224`` or ``[224]`` (the official tutorial's form) → 224."""
    if isinstance(resolution, list | tuple):
        if len(resolution) != 1:
            raise SpaceError(f"{source}: expected one resolution, got {list(resolution)!r}")
        resolution = resolution[0]
    return _int(resolution, source)


def from_ofa_config(config: Mapping[str, Any], resolution: Any = None, source: str = "ofa config") -> Fields:
    """Official ``{"ks", "e", "d"[, "r"]}`` → (resolution, depths, kernels, expands).

    ``resolution`` defaults to the config's own ``"r"``. The slot count must be a multiple of the
    stage count (``max_depth`` slots per stage).
    """
    if not isinstance(config, Mapping):
        raise SpaceError(f"{source}: expected a mapping with ks, e, d, got {type(config).__name__}")
    if resolution is None:
        if "r" not in config:
            raise SpaceError(f"{source}: no resolution given and no field 'r'")
        resolution = config["r"]
    r = parse_resolution(resolution, f"{source}.r")
    ks, e, d = (_ints(config, key, source) for key in ("ks", "e", "d"))
    if len(ks) != len(e):
        raise SpaceError(f"{source}: ks has {len(ks)} entries but e has {len(e)}")
    if len(ks) % len(d):
        raise SpaceError(f"{source}: {len(ks)} ks/e entries do not split into {len(d)} stages (d)")
    max_depth = len(ks) // len(d)
    for i, depth in enumerate(d):
        if not 1 <= depth <= max_depth:
            raise SpaceError(f"{source}.d[{i}]: {depth} is outside 1..{max_depth} (slots per stage)")
    return r, d, ks, e


def to_ofa_config(
    resolution: int, depths: Sequence[int], kernels: Sequence[int], expands: Sequence[int]
) -> dict[str, Any]:
    """(resolution, depths, kernels, expands) → official ``{"ks", "e", "d", "r"}``."""
    return {
        "ks": [int(k) for k in kernels],
        "e": [int(x) for x in expands],
        "d": [int(x) for x in depths],
        "r": int(resolution),
    }
