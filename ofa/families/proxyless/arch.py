"""``ProxylessArch``: one OFA-ProxylessNAS subnet, mbv3's `Arch` fields in the official slot order.

Slot ``stage * max_depth + index`` holds a block's kernel and expand ratio, the last stage a single
slot; ``depths`` has one entry per stage, the last always 1. That is the official
``set_active_subnet(ks, e, d)`` order, so the official config converts by a checked copy. The JSON
form carries ``"family": "proxyless"`` (a file without it is an OFA-MBv3 arch).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ofa.families.mbv3.arch import Arch
from ofa.families.mbv3.official_encoding import parse_resolution, to_ofa_config
from ofa.utils.errors import SpaceError

FAMILY = "proxyless"


class ProxylessArch(Arch):
    """One subnet of a `ProxylessSpace`: resolution, depth per stage (last 1), kernel and expand per slot."""

    def to_dict(self) -> dict[str, Any]:
        return {"family": FAMILY, **super().to_dict()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "arch") -> ProxylessArch:
        """Parse an arch mapping with ``"family": "proxyless"``; ``SpaceError`` naming ``source`` otherwise."""
        if not isinstance(d, Mapping):
            raise SpaceError(f"{source}: expected a JSON object with family/resolution/depths/kernels/expands")
        if d.get("family") != FAMILY:
            raise SpaceError(f"{source}.family: expected {FAMILY!r}, got {d.get('family')!r}")
        arch = super().from_dict({k: v for k, v in d.items() if k != "family"}, source)
        assert isinstance(arch, ProxylessArch)
        return arch

    @classmethod
    def from_ofa_config(
        cls, config: Mapping[str, Any], resolution: int | Sequence[int] | None = None, source: str = "ofa config"
    ) -> ProxylessArch:
        """An official OFAProxylessNASNets subnet ``{"ks", "e", "d"[, "r"]}`` (``ks``/``e``: one slot per block
        after the first, ``d``: one per stage) at ``resolution`` (default: the config's ``"r"``).

        The official network runs one block in its last stage whatever ``d[-1]`` says, so that entry becomes 1;
        whether the arch fits a space is `ProxylessSpace.validate`'s to say.
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
        if len(d) < 2 or (len(ks) - 1) % (len(d) - 1):
            raise SpaceError(f"{source}: {len(ks)} ks/e entries are not {len(d) - 1} equal stages (d) plus one block")
        max_depth = (len(ks) - 1) // (len(d) - 1)
        for i, depth in enumerate(d[:-1]):
            if not 1 <= depth <= max_depth:
                raise SpaceError(f"{source}.d[{i}]: {depth} is outside 1..{max_depth} (slots per stage)")
        if d[-1] < 1:
            raise SpaceError(f"{source}.d[{len(d) - 1}]: {d[-1]} is below 1 (the last stage runs one block)")
        return cls(r, (*d[:-1], 1), ks, e)

    def to_ofa_config(self) -> dict[str, Any]:
        """The official encoding ``{"ks", "e", "d", "r"}`` of this arch."""
        return to_ofa_config(self.resolution, self.depths, self.kernels, self.expands)


def _ints(config: Mapping[str, Any], key: str, source: str) -> tuple[int, ...]:
    """A non-empty list of integers (integral floats too: official JSON configs sometimes write ``6.0``)."""
    if key not in config:
        raise SpaceError(f"{source}: missing field {key!r} (official subnet configs have ks, e, d)")
    value = config[key]
    if not isinstance(value, list | tuple) or not value:
        raise SpaceError(f"{source}.{key}: expected a non-empty list of integers, got {value!r}")
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, int | float) or int(v) != v:
            raise SpaceError(f"{source}.{key}[{i}]: expected an integer, got {v!r}")
    return tuple(int(v) for v in value)
