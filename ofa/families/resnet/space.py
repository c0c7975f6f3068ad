"""The OFA-ResNet search space: the one definition of the elastic skeleton every other resnet module reads.

As the official ``OFAResNets`` builds it: a ResNet-D stem (3x3/2 conv to the middle width, a residual
3x3 conv block kept only at the largest stem depth gene, 3x3 conv to the stem width), a 3x3/2 max-pool,
then stages of bottleneck blocks (stride in the 3x3 conv, first block of a stage with the avg-pool + 1x1
conv shortcut). Each width has one choice per width multiplier, ``make_divisible(base * w)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from timm.layers import make_divisible

from ofa.families.choices import fingerprint_of
from ofa.families.resnet.arch import FAMILY, ResNetArch
from ofa.families.resnet.layers import LayerSpec, mid_channels, out_size
from ofa.families.resnet.space_parse import parse_fields
from ofa.utils.errors import SpaceError

PAPER_RESOLUTIONS = tuple(range(128, 225, 4))


@dataclass(frozen=True)
class ResNetSpace:
    """Elastic ResNet space: fixed skeleton plus depth/expand/width/resolution choices.

    ``depths`` are extra blocks per stage over ``base_depths``; the stem's depth gene is the smallest or
    the largest of them and runs the stem's residual block only at the largest (the official rule).
    """

    widths: tuple[float, ...] = (0.65, 0.8, 1.0)
    expands: tuple[float, ...] = (0.2, 0.25, 0.35)
    depths: tuple[int, ...] = (0, 1, 2)
    resolutions: tuple[int, ...] = PAPER_RESOLUTIONS
    stage_widths: tuple[int, ...] = (256, 512, 1024, 2048)
    base_depths: tuple[int, ...] = (2, 2, 4, 2)
    strides: tuple[int, ...] = (1, 2, 2, 2)
    stem_width: int = 64
    stem_stride: int = 2
    stem_pool: bool = True
    in_channels: int = 3
    num_classes: int = 1000
    dropout: float = 0.0

    def __post_init__(self) -> None:
        self._check()

    # ----------------------------------------------------------------- construction
    @classmethod
    def ofa_resnet50(cls) -> ResNetSpace:
        """The published OFA-ResNet50 space (``ofa_resnet50_d0-1-2_e0.2-0.25-0.35_w0.65-0.8-1.0``)."""
        return cls()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "space") -> ResNetSpace:
        """Build from a recipe's ``space:`` mapping (``family: resnet``; ``preset: ofa_resnet50`` is the default)."""
        kwargs = parse_fields(d, source, [f.name for f in fields(cls)])
        try:
            return cls(**kwargs)
        except SpaceError as exc:
            raise SpaceError(f"{source}.{exc}") from None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"family": FAMILY}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    def fingerprint(self) -> str:
        """Short stable hash of the space; tables, predictors and checkpoints record it."""
        return fingerprint_of(self.to_dict())

    def _check(self) -> None:
        for name in ("widths", "expands", "depths", "resolutions"):
            values = getattr(self, name)
            if not values or list(values) != sorted(set(values)):
                raise SpaceError(f"{name}: choices must be increasing and distinct, got {list(values)}")
        if min(self.widths) <= 0 or min(self.expands) <= 0 or min(self.depths) < 0 or min(self.resolutions) < 1:
            raise SpaceError("widths/expands/resolutions must be positive and depths not negative")
        n = len(self.stage_widths)
        for name in ("base_depths", "strides"):
            if len(getattr(self, name)) != n:
                raise SpaceError(f"{name}: expected {n} values (one per stage of stage_widths)")
        if n == 0 or min(self.stage_widths) < 1 or min(self.base_depths) + min(self.depths) < 1:
            raise SpaceError("stage_widths: every stage needs a positive width and at least one block")
        for name, values in (("strides", self.strides), ("stem_stride", (self.stem_stride,))):
            if any(s not in (1, 2) for s in values):
                raise SpaceError(f"{name}: strides must be 1 or 2, got {values}")
        if sum(s == 2 for s in self.strides) > 3:
            raise SpaceError("strides: at most 3 stages of stride 2 (timm's ByobNet dilates past output stride 32)")
        for name in ("stem_width", "in_channels", "num_classes"):
            if getattr(self, name) < 1:
                raise SpaceError(f"{name}: must be positive, got {getattr(self, name)}")
        if not 0 <= self.dropout < 1:
            raise SpaceError(f"dropout: must be in [0, 1), got {self.dropout}")
        for s in range(n):
            if self.strides[s] == 1 and set(self.block_in_choices(s)) & set(self.stage_choices(s)):
                raise SpaceError(
                    f"stage_widths[{s}]: a width choice equals one of its input's at stride 1, where the "
                    "official shortcut conv and timm's identity shortcut would differ"
                )

    # ----------------------------------------------------------------- widths
    def _choices(self, base: int) -> tuple[int, ...]:
        return tuple(make_divisible(base * w) for w in self.widths)

    def stem_out_choices(self) -> tuple[int, ...]:
        return self._choices(self.stem_width)

    def stem_mid_choices(self) -> tuple[int, ...]:
        return tuple(make_divisible(c // 2) for c in self.stem_out_choices())

    def stage_choices(self, stage: int) -> tuple[int, ...]:
        return self._choices(self.stage_widths[stage])

    def block_in_choices(self, stage: int) -> tuple[int, ...]:
        """Input width choices of a stage's first block (the previous stage's, or the stem's)."""
        return self.stem_out_choices() if stage == 0 else self.stage_choices(stage - 1)

    @property
    def num_stages(self) -> int:
        return len(self.stage_widths)

    @property
    def max_depth(self) -> int:
        return max(self.depths)

    def stage_slots(self, stage: int) -> int:
        return self.base_depths[stage] + self.max_depth

    def slot_offset(self, stage: int) -> int:
        return sum(self.stage_slots(s) for s in range(stage))

    @property
    def num_slots(self) -> int:
        return self.slot_offset(self.num_stages)

    @property
    def num_widths(self) -> int:
        """Width genes: the stem's middle and output widths, then one per stage."""
        return 2 + self.num_stages

    def stem_block_runs(self, arch: ResNetArch) -> bool:
        return arch.depths[0] == self.max_depth

    def stage_depth(self, arch: ResNetArch, stage: int) -> int:
        """Blocks ``arch`` runs in ``stage``: the base depth plus its extra-depth gene."""
        return self.base_depths[stage] + arch.depths[1 + stage]

    def channels(self, arch: ResNetArch) -> tuple[int, int, tuple[int, ...]]:
        """(stem middle width, stem output width, each stage's output width) of ``arch``."""
        w = arch.widths
        stages = tuple(self.stage_choices(s)[w[2 + s]] for s in range(self.num_stages))
        return self.stem_mid_choices()[w[0]], self.stem_out_choices()[w[1]], stages

    # ----------------------------------------------------------------- archs
    def elastic_dims(self) -> dict[str, tuple[Any, ...]]:
        """The dimensions a training phase can restrict; widths by their index into ``widths`` (as archs say them)."""
        widths = tuple(range(len(self.widths)))
        return {"depths": self.depths, "expands": self.expands, "widths": widths, "resolutions": self.resolutions}

    def uniform_arch(self, resolution: int, depth: int, expand: float, width: int) -> ResNetArch:
        """The subnet making the same choice everywhere (``width`` an index; not checked against the space)."""
        return ResNetArch(
            resolution, (depth,) * (1 + self.num_stages), (expand,) * self.num_slots, (width,) * self.num_widths
        )

    def max_arch(self, resolution: int | None = None) -> ResNetArch:
        r = max(self.resolutions) if resolution is None else resolution
        return self.uniform_arch(r, max(self.depths), max(self.expands), len(self.widths) - 1)

    def min_arch(self, resolution: int | None = None) -> ResNetArch:
        r = min(self.resolutions) if resolution is None else resolution
        return self.uniform_arch(r, min(self.depths), min(self.expands), 0)

    def official_arch(self, config: Mapping[str, Any], source: str = "ofa config") -> ResNetArch:
        """The arch of an official subnet config ``{"d", "e", "w", "r"}``: a stem depth ``d[0]`` below the largest
        skips the stem block (the official rule), which is this space's stem gene at the smallest depth."""
        arch = ResNetArch.from_ofa_config(config, source=source)
        if arch.depths and arch.depths[0] in self.depths and arch.depths[0] != self.max_depth:
            arch = replace(arch, depths=(min(self.depths), *arch.depths[1:]))
        return arch

    def stamp(self, arch: ResNetArch) -> ResNetArch:
        """``arch`` marked as belonging to this space (its JSON then carries the fingerprint)."""
        return replace(arch, space=self.fingerprint())

    def validate(self, arch: ResNetArch, source: str = "arch") -> ResNetArch:
        """Return ``arch`` if it belongs to this space (fingerprint, then values), else raise ``SpaceError``."""
        if arch.space is not None and arch.space != self.fingerprint():
            raise SpaceError(
                f"{source}: the arch was chosen in space {arch.space}, but this space is {self.fingerprint()}"
            )
        return self.check_choices(arch, source)

    def check_choices(self, arch: ResNetArch, source: str = "arch") -> ResNetArch:
        """Return ``arch`` if every value is a choice of this space (shape and values; no fingerprint)."""
        if not isinstance(arch, ResNetArch):
            raise SpaceError(f"{source}: not an OFA-ResNet arch ({type(arch).__name__})")
        if arch.resolution not in self.resolutions:
            raise SpaceError(f"{source}.resolution: {arch.resolution} is not one of {list(self.resolutions)}")
        stem = (min(self.depths), self.max_depth)
        for name, values, length, choices in (
            ("depths", arch.depths, 1 + self.num_stages, self.depths),
            ("expands", arch.expands, self.num_slots, self.expands),
            ("widths", arch.widths, self.num_widths, tuple(range(len(self.widths)))),
        ):
            if len(values) != length:
                raise SpaceError(f"{source}.{name}: expected {length} values for this space, got {len(values)}")
            for i, v in enumerate(values):
                allowed = stem if (name, i) == ("depths", 0) else choices
                if v not in allowed:
                    raise SpaceError(f"{source}.{name}[{i}]: {v} is not one of {sorted(set(allowed))}")
        return arch

    def count(self) -> int:
        """Number of distinct gene settings per resolution (unused slots do not count)."""
        e = len(self.expands)
        stages = 1
        for base in self.base_depths:
            stages *= len(self.widths) * sum(e ** (base + d) for d in self.depths)
        return len({min(self.depths), self.max_depth}) * len(self.widths) ** 2 * stages

    # ----------------------------------------------------------------- layers, MACs, params
    def stem_layers(self, resolution: int, mid: int, out: int, residual: bool) -> list[LayerSpec]:
        """The stem's layers (and the max-pool) at ``resolution`` for the given stem widths."""
        hw = out_size(resolution, self.stem_stride)
        layers = [LayerSpec("stem", resolution, self.in_channels, mid, stride=self.stem_stride)]
        if residual:
            layers.append(LayerSpec("stem_res", hw, mid, mid))
        layers.append(LayerSpec("stem", hw, mid, out))
        if self.stem_pool:
            layers.append(LayerSpec("pool", hw, out, out, stride=2))
        return layers

    def stage_input_hw(self, resolution: int, stage: int) -> int:
        """Spatial size entering ``stage`` (independent of the arch: only first blocks stride)."""
        hw = out_size(resolution, self.stem_stride)
        hw = out_size(hw, 2) if self.stem_pool else hw
        for s in self.strides[:stage]:
            hw = out_size(hw, s)
        return hw

    def block_spec(self, resolution: int, stage: int, index: int, in_c: int, out_c: int, expand: float) -> LayerSpec:
        """Block ``index`` of ``stage`` with input width ``in_c``, output width ``out_c`` and ratio ``expand``."""
        hw, stride = self.stage_input_hw(resolution, stage), self.strides[stage]
        if index > 0:
            hw, stride = out_size(hw, stride), 1
        # first blocks always have the conv shortcut: `_check` keeps their widths apart at stride 1
        return LayerSpec("bottleneck", hw, in_c, out_c, mid_channels(out_c, expand), stride, index == 0)

    def head_layer(self, resolution: int, in_c: int) -> LayerSpec:
        return LayerSpec("head", self.stage_input_hw(resolution, self.num_stages), in_c, self.num_classes)

    def layers(self, arch: ResNetArch) -> list[LayerSpec]:
        """Every layer the subnet runs, in order, at its input shape."""
        r = arch.resolution
        mid, c, outs = self.channels(arch)
        layers = self.stem_layers(r, mid, c, self.stem_block_runs(arch))
        for s, out in enumerate(outs):
            for j in range(self.stage_depth(arch, s)):
                layers.append(self.block_spec(r, s, j, c, out, arch.expands[self.slot_offset(s) + j]))
                c = out
        return [*layers, self.head_layer(r, c)]

    def macs(self, arch: ResNetArch) -> int:
        return sum(layer.macs for layer in self.layers(arch))

    def params(self, arch: ResNetArch) -> int:
        return sum(layer.params for layer in self.layers(arch))
