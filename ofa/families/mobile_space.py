"""What the MobileNet-style spaces (MobileNetV3, ProxylessNAS) derive alike from their fields.

A mixin of their frozen dataclasses (it adds no fields): widths scaled by ``width_mult`` and made divisible
by 8 as the official code scales them, the stage and depth counts, and the dict and fingerprint that
tables, predictors and checkpoints record.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any, ClassVar

from timm.layers import make_divisible

from ofa.families.choices import fingerprint_of


class MobileSpaceMixin:
    # The "family" entry of ``to_dict`` (None: none, as MobileNetV3 spaces have always been written).
    RECORDED_FAMILY: ClassVar[str | None] = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"family": self.RECORDED_FAMILY} if self.RECORDED_FAMILY else {}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if f.name == "stages":
                value = [asdict(s) for s in value]
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out

    def fingerprint(self) -> str:
        """Short stable hash of the space; tables, predictors and checkpoints record it."""
        return fingerprint_of(self.to_dict())

    # ----------------------------------------------------------------- derived widths
    def _scale(self, width: int) -> int:
        return make_divisible(width * self.width_mult)

    @property
    def stem_channels(self) -> int:
        return self._scale(self.stem_width)

    @property
    def first_channels(self) -> int:
        return self._scale(self.first_width)

    @property
    def stage_channels(self) -> tuple[int, ...]:
        return tuple(self._scale(s.width) for s in self.stages)

    @property
    def feature_channels(self) -> int:
        """Scaled by every multiplier, below 1 too, as the official networks do (640 for MobileNetV3 at 0.5)."""
        return self._scale(self.feature_width)

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    @property
    def max_depth(self) -> int:
        return max(self.depths)
