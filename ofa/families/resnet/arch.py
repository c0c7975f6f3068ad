"""``ResNetArch``, one subnet of an OFA-ResNet space, and its JSON form (``"family": "resnet"``).

The fields are the official genes: ``depths`` is the stem's depth gene then the extra blocks of each
stage over its base depth (official ``d``), ``expands`` one bottleneck ratio per block slot (``e``),
``widths`` indices into the space's width multipliers for the stem's middle and output widths and then
each stage (``w``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ofa.families.arch_file import ArchFile
from ofa.utils.errors import SpaceError

FAMILY = "resnet"
ARCH_FIELDS = ("resolution", "depths", "expands", "widths")


@dataclass(frozen=True)
class ResNetArch(ArchFile):
    """One subnet: resolution, depth genes (stem, then extra blocks per stage), expand per slot, width indices.

    Slots are numbered stage by stage, each stage holding ``base depth + max depth`` of them; slots past a
    stage's depth are ignored but kept. ``extra`` and ``space`` (fingerprint) are as in mbv3's ``Arch``.
    """

    resolution: int
    depths: tuple[int, ...]
    expands: tuple[float, ...]
    widths: tuple[int, ...]
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)
    space: str | None = field(default=None, compare=False, hash=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "family": FAMILY,
            "resolution": int(self.resolution),
            "depths": [int(d) for d in self.depths],
            "expands": [float(e) for e in self.expands],
            "widths": [int(w) for w in self.widths],
        }
        if self.space is not None:
            out["space"] = self.space
        return {**out, **self.extra}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "arch") -> ResNetArch:
        """Parse an arch mapping; raises ``SpaceError`` naming ``source`` and the first bad field."""
        if not isinstance(d, Mapping):
            raise SpaceError(f"{source}: expected a JSON object with resolution/depths/expands/widths")
        if d.get("family", FAMILY) != FAMILY:
            raise SpaceError(f"{source}.family: {d['family']!r} is not {FAMILY!r}")
        missing = [k for k in ARCH_FIELDS if k not in d]
        if missing:
            raise SpaceError(f"{source}: missing field {missing[0]!r}")
        res = d["resolution"]
        if not _is_int(res):
            raise SpaceError(f"{source}: field 'resolution' must be an integer, got {res!r}")
        space = d.get("space")
        if space is not None and not isinstance(space, str):
            raise SpaceError(f"{source}: field 'space' must be a space fingerprint string, got {space!r}")
        extra = {k: v for k, v in d.items() if k not in (*ARCH_FIELDS, "space", "family")}
        return cls(
            res,
            _ints(d["depths"], f"{source}.depths"),
            _floats(d["expands"], f"{source}.expands"),
            _ints(d["widths"], f"{source}.widths"),
            extra,
            space,
        )

    def short(self) -> str:
        """A compact human-readable name, e.g. ``r160-d02211-e0.2,0.35..-w012210``."""
        expands = ",".join(f"{e:g}" for e in self.expands)
        return f"r{self.resolution}-d{''.join(map(str, self.depths))}-e{expands}-w{''.join(map(str, self.widths))}"

    @classmethod
    def from_ofa_config(
        cls, config: Mapping[str, Any], resolution: int | Sequence[int] | None = None, source: str = "ofa config"
    ) -> ResNetArch:
        """An official OFAResNets subnet ``{"d", "e", "w"}`` at ``resolution`` (int or ``[int]``; default the
        config's ``"r"``). Whether it fits a space (and which stem depths skip the stem block) is the space's to say."""
        if not isinstance(config, Mapping):
            raise SpaceError(f"{source}: expected a mapping with d, e, w")
        missing = [k for k in ("d", "e", "w") if k not in config]
        if missing:
            raise SpaceError(f"{source}: missing field {missing[0]!r}")
        r = config.get("r") if resolution is None else resolution
        if isinstance(r, list | tuple) and len(r) == 1:
            r = r[0]
        if not _is_int(r):
            raise SpaceError(f"{source}.r: expected the resolution as an integer, got {r!r}")
        return cls(
            r,
            _ints(config["d"], f"{source}.d"),
            _floats(config["e"], f"{source}.e"),
            _ints(config["w"], f"{source}.w"),
        )

    def to_ofa_config(self) -> dict[str, Any]:
        """The official encoding ``{"d", "e", "w", "r"}`` (``set_active_subnet(d=, e=, w=)`` plus the resolution)."""
        return {
            "d": [int(d) for d in self.depths],
            "e": [float(e) for e in self.expands],
            "w": [int(w) for w in self.widths],
            "r": int(self.resolution),
        }


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _ints(value: Any, source: str) -> tuple[int, ...]:
    if not isinstance(value, list | tuple) or not all(_is_int(v) for v in value):
        raise SpaceError(f"{source}: expected a list of integers, got {value!r}")
    return tuple(value)


def _floats(value: Any, source: str) -> tuple[float, ...]:
    if not isinstance(value, list | tuple) or not all(_is_number(v) for v in value):
        raise SpaceError(f"{source}: expected a list of numbers, got {value!r}")
    return tuple(float(v) for v in value)
