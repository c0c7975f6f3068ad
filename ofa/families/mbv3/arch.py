"""``Arch``, one subnet of a search space, and its JSON form (the file `ofa search` writes and `ofa export` reads).

An arch file names the space it belongs to by the space's fingerprint (key ``space``), so a
consumer refuses an arch of another supernet instead of guessing; ``SearchSpace.validate`` checks it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ofa.families.arch_file import ArchFile
from ofa.families.mbv3 import official_encoding
from ofa.utils.errors import SpaceError

ARCH_FIELDS = ("resolution", "depths", "kernels", "expands")


@dataclass(frozen=True)
class Arch(ArchFile):
    """One subnet: resolution, depth per stage, kernel and expand per block slot.

    Slots are ``stage * max_depth + index``; slots past a stage's depth are ignored but kept, so
    every arch of a space has the same shape. ``extra`` carries optional fields written by search
    and export (predicted_top1, latency_ms, macs, params, lut); ``space`` is the fingerprint of the
    space the arch was chosen in (None when unknown). Neither is part of identity.
    """

    resolution: int
    depths: tuple[int, ...]
    kernels: tuple[int, ...]
    expands: tuple[int, ...]
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)
    space: str | None = field(default=None, compare=False, hash=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "resolution": int(self.resolution),
            "depths": [int(d) for d in self.depths],
            "kernels": [int(k) for k in self.kernels],
            "expands": [int(e) for e in self.expands],
        }
        if self.space is not None:
            out["space"] = self.space
        return {**out, **self.extra}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "arch") -> Arch:
        """Parse an arch mapping; raises ``SpaceError`` naming ``source`` and the first bad field."""
        if not isinstance(d, Mapping):
            raise SpaceError(f"{source}: expected a JSON object with resolution/depths/kernels/expands")
        missing = [k for k in ARCH_FIELDS if k not in d]
        if missing:
            raise SpaceError(f"{source}: missing field {missing[0]!r}")

        def ints(name: str) -> tuple[int, ...]:
            value = d[name]
            if not isinstance(value, list | tuple) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in value
            ):
                raise SpaceError(f"{source}: field {name!r} must be a list of integers, got {value!r}")
            return tuple(value)

        res = d["resolution"]
        if not isinstance(res, int) or isinstance(res, bool):
            raise SpaceError(f"{source}: field 'resolution' must be an integer, got {res!r}")
        space = d.get("space")
        if space is not None and not isinstance(space, str):
            raise SpaceError(f"{source}: field 'space' must be a space fingerprint string, got {space!r}")
        extra = {k: v for k, v in d.items() if k not in (*ARCH_FIELDS, "space")}
        return cls(res, ints("depths"), ints("kernels"), ints("expands"), extra, space)

    def short(self) -> str:
        """A compact human-readable name, e.g. ``r16-d2.3.1-k35..-e46..``."""
        return (
            f"r{self.resolution}-d{''.join(map(str, self.depths))}"
            f"-k{''.join(map(str, self.kernels))}-e{''.join(map(str, self.expands))}"
        )

    @classmethod
    def from_ofa_config(
        cls, config: Mapping[str, Any], resolution: int | Sequence[int] | None = None, source: str = "ofa config"
    ) -> Arch:
        """An official once-for-all subnet ``{"ks", "e", "d"}`` at ``resolution`` (int or ``[int]``).

        ``resolution`` defaults to the config's ``"r"``. Raises ``SpaceError`` naming ``source`` and
        the first bad field; whether the arch fits a space is ``SearchSpace.validate``'s to say.
        """
        return cls(*official_encoding.from_ofa_config(config, resolution, source))

    def to_ofa_config(self) -> dict[str, Any]:
        """The official once-for-all encoding ``{"ks", "e", "d", "r"}`` of this arch."""
        return official_encoding.to_ofa_config(self.resolution, self.depths, self.kernels, self.expands)
