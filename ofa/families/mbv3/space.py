"""The search space: the one definition of the elastic skeleton every other module reads.

The supernet, the static subnet builder, the MACs/params counter, the latency-table key builder
and the gene encoding (``ofa.families.mbv3.encoding``) all derive what they need from ``SearchSpace`` here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ofa.families.choices import fmt_choices, parse_int_tuple
from ofa.families.mbv3.arch import Arch
from ofa.families.mbv3.layers import LayerSpec, mid_channels
from ofa.families.mobile_space import MobileSpaceMixin
from ofa.utils.errors import SpaceError

ACTIVATIONS = ("relu", "hswish")


@dataclass(frozen=True)
class StageSpec:
    """One elastic stage: output width, stride of its first block, squeeze-excite, activation."""

    width: int
    stride: int
    se: bool
    act: str


MBV3_STAGES = (  # the stages of OFA-MBv3, the paper's space
    StageSpec(24, 2, False, "relu"),
    StageSpec(40, 2, True, "relu"),
    StageSpec(80, 2, False, "hswish"),
    StageSpec(112, 1, True, "hswish"),
    StageSpec(160, 2, True, "hswish"),
)

_SPACE_FIELDS = (
    "stages",
    "kernels",
    "expands",
    "depths",
    "resolutions",
    "stem_width",
    "stem_stride",
    "stem_act",
    "first_width",
    "final_expand_width",
    "feature_width",
    "head_act",
    "width_mult",
    "in_channels",
    "num_classes",
    "dropout",
)


@dataclass(frozen=True)
class SearchSpace(MobileSpaceMixin):
    """Elastic MobileNetV3 space: fixed skeleton plus kernel/expand/depth/resolution choices.

    Widths are given at width multiplier 1 and rounded to multiples of 8 after scaling, as OFA does
    (the feature width included, for every multiplier).
    """

    stages: tuple[StageSpec, ...]
    kernels: tuple[int, ...] = (3, 5, 7)
    expands: tuple[int, ...] = (3, 4, 6)
    depths: tuple[int, ...] = (2, 3, 4)
    resolutions: tuple[int, ...] = tuple(range(128, 225, 4))
    stem_width: int = 16
    stem_stride: int = 2
    stem_act: str = "hswish"
    first_width: int = 16
    final_expand_width: int = 960
    feature_width: int = 1280
    head_act: str = "hswish"
    width_mult: float = 1.0
    in_channels: int = 3
    num_classes: int = 1000
    dropout: float = 0.1

    def __post_init__(self) -> None:
        self._check()

    # ----------------------------------------------------------------- construction
    @classmethod
    def mbv3(cls) -> SearchSpace:
        """The Once-for-All MobileNetV3 space of the paper (OFA-MBv3, width multiplier 1.0).

        A variant is ``dataclasses.replace(SearchSpace.mbv3(), width_mult=1.2)`` (checked again).
        """
        return cls(stages=MBV3_STAGES)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "space") -> SearchSpace:
        """Build from a recipe's ``space:`` mapping; ``preset: mbv3`` starts from the paper space."""
        if not isinstance(d, Mapping):
            raise SpaceError(f"{source}: expected a mapping")
        d = dict(d)
        preset = d.pop("preset", None)
        unknown = sorted(set(d) - set(_SPACE_FIELDS))
        if unknown:
            raise SpaceError(f"{source}.{unknown[0]}: unknown key (allowed: preset, {', '.join(_SPACE_FIELDS)})")
        if preset not in (None, "mbv3"):
            raise SpaceError(f"{source}.preset: unknown preset {preset!r} (allowed: mbv3)")
        kwargs: dict[str, Any] = {}
        for name, value in d.items():
            if name == "stages":
                kwargs[name] = _parse_stages(value, f"{source}.stages")
            elif name in ("kernels", "expands", "depths", "resolutions"):
                kwargs[name] = parse_int_tuple(value, f"{source}.{name}")
            elif name in ("stem_act", "head_act"):
                kwargs[name] = value
            elif name in ("width_mult", "dropout"):
                if not isinstance(value, int | float) or isinstance(value, bool):
                    raise SpaceError(f"{source}.{name}: expected a number, got {value!r}")
                kwargs[name] = float(value)
            else:
                if not isinstance(value, int) or isinstance(value, bool):
                    raise SpaceError(f"{source}.{name}: expected an integer, got {value!r}")
                kwargs[name] = value
        if preset == "mbv3":
            return cls(**{"stages": MBV3_STAGES, **kwargs})
        if "stages" not in kwargs:
            raise SpaceError(f"{source}.stages: missing (or give preset: mbv3)")
        try:
            return cls(**kwargs)
        except SpaceError as exc:
            raise SpaceError(f"{source}.{exc}") from None

    def _check(self) -> None:
        def fail(name: str, msg: str) -> None:
            raise SpaceError(f"{name}: {msg}")

        if not self.stages:
            fail("stages", "at least one stage is required")
        for i, s in enumerate(self.stages):
            if s.width < 1:
                fail(f"stages[{i}].width", f"must be positive, got {s.width}")
            if s.stride not in (1, 2):
                fail(f"stages[{i}].stride", f"must be 1 or 2, got {s.stride}")
            if s.act not in ACTIVATIONS:
                fail(f"stages[{i}].act", f"{s.act!r} is not one of {list(ACTIVATIONS)}")
        for name in ("kernels", "expands", "depths", "resolutions"):
            values = getattr(self, name)
            if not values:
                fail(name, "needs at least one choice")
            if len(set(values)) != len(values) or list(values) != sorted(values):
                fail(name, f"choices must be increasing and distinct, got {list(values)}")
            if min(values) < 1:
                fail(name, f"choices must be positive, got {list(values)}")
        if any(k % 2 == 0 for k in self.kernels):
            fail("kernels", f"kernel sizes must be odd, got {list(self.kernels)}")
        for name in ("stem_act", "head_act"):
            if getattr(self, name) not in ACTIVATIONS:
                fail(name, f"{getattr(self, name)!r} is not one of {list(ACTIVATIONS)}")
        for name in ("stem_width", "first_width", "final_expand_width", "feature_width", "in_channels", "num_classes"):
            if getattr(self, name) < 1:
                fail(name, f"must be positive, got {getattr(self, name)}")
        if self.stem_stride not in (1, 2):
            fail("stem_stride", f"must be 1 or 2, got {self.stem_stride}")
        if self.width_mult <= 0:
            fail("width_mult", f"must be positive, got {self.width_mult}")
        if not 0 <= self.dropout < 1:
            fail("dropout", f"must be in [0, 1), got {self.dropout}")

    # ----------------------------------------------------------------- derived widths
    @property
    def final_expand_channels(self) -> int:
        return self._scale(self.final_expand_width)

    @property
    def num_slots(self) -> int:
        return self.num_stages * self.max_depth

    def block_io(self, stage: int, index: int) -> tuple[int, int, int]:
        """(in_channels, out_channels, stride) of block ``index`` of ``stage``."""
        widths = self.stage_channels
        in_c = (self.first_channels if stage == 0 else widths[stage - 1]) if index == 0 else widths[stage]
        stride = self.stages[stage].stride if index == 0 else 1
        return in_c, widths[stage], stride

    # ----------------------------------------------------------------- archs
    def uniform_arch(self, resolution: int, kernel: int, expand: int, depth: int) -> Arch:
        """The subnet that makes the same choice in every stage and block (not checked against the space)."""
        n = self.num_slots
        return Arch(resolution, (depth,) * self.num_stages, (kernel,) * n, (expand,) * n)

    def max_arch(self, resolution: int | None = None) -> Arch:
        r = max(self.resolutions) if resolution is None else resolution
        return self.uniform_arch(r, max(self.kernels), max(self.expands), max(self.depths))

    def min_arch(self, resolution: int | None = None) -> Arch:
        r = min(self.resolutions) if resolution is None else resolution
        return self.uniform_arch(r, min(self.kernels), min(self.expands), min(self.depths))

    def stamp(self, arch: Arch) -> Arch:
        """``arch`` marked as belonging to this space (its JSON then carries the fingerprint)."""
        return replace(arch, space=self.fingerprint())

    def validate(self, arch: Arch, source: str = "arch") -> Arch:
        """Return ``arch`` if it belongs to this space, else raise ``SpaceError`` naming the first bad field.

        An arch stamped with another space's fingerprint is refused even when its values fit (the
        widths behind them may differ); an arch without a fingerprint is judged by its values alone.
        """
        if arch.space is not None and arch.space != self.fingerprint():
            raise SpaceError(
                f"{source}: the arch was chosen in space {arch.space}, but this space is {self.fingerprint()}"
            )
        return self.check_choices(arch, source)

    def check_choices(self, arch: Arch, source: str = "arch") -> Arch:
        """Return ``arch`` if every value is a choice of this space (shape and values; no fingerprint).

        What the gene encoding needs: a space restricted to fewer resolutions encodes its parent's archs.
        """
        if arch.resolution not in self.resolutions:
            raise SpaceError(f"{source}.resolution: {arch.resolution} is not one of {fmt_choices(self.resolutions)}")
        for name, values, length, choices in (
            ("depths", arch.depths, self.num_stages, self.depths),
            ("kernels", arch.kernels, self.num_slots, self.kernels),
            ("expands", arch.expands, self.num_slots, self.expands),
        ):
            if len(values) != length:
                raise SpaceError(f"{source}.{name}: expected {length} values for this space, got {len(values)}")
            for i, v in enumerate(values):
                if v not in choices:
                    raise SpaceError(f"{source}.{name}[{i}]: {v} is not one of {list(choices)}")
        return arch

    def elastic_dims(self) -> dict[str, tuple[int, ...]]:
        """The dimensions a training phase can restrict, with their choices (``sample_arch``'s keywords)."""
        return {name: getattr(self, name) for name in ("kernels", "expands", "depths", "resolutions")}

    def count(self) -> int:
        """Number of distinct subnets per resolution (unused slots do not count)."""
        per_block = len(self.kernels) * len(self.expands)
        per_stage = sum(per_block**d for d in self.depths)
        return per_stage**self.num_stages

    # ----------------------------------------------------------------- layers, MACs, params
    def stage_input_hw(self, resolution: int, stage: int) -> int:
        """Spatial size entering ``stage`` (independent of the arch's depths: later blocks have stride 1)."""
        hw = (resolution - 1) // self.stem_stride + 1
        for s in self.stages[:stage]:
            hw = (hw - 1) // s.stride + 1
        return hw

    def block_spec(self, resolution: int, stage: int, index: int, kernel: int, expand: int) -> LayerSpec:
        """The elastic block at ``index`` of ``stage`` with the given kernel and expand ratio."""
        in_c, out_c, stride = self.block_io(stage, index)
        hw = self.stage_input_hw(resolution, stage)
        if index > 0:
            hw = (hw - 1) // self.stages[stage].stride + 1
        st = self.stages[stage]
        return LayerSpec("mbconv", hw, in_c, out_c, kernel, mid_channels(in_c, expand), stride, st.se, st.act)

    def fixed_layers(self, resolution: int) -> list[LayerSpec]:
        """Layers every subnet at ``resolution`` runs: stem, first block, final expand, head."""
        hw = self.stage_input_hw(resolution, 0)
        last = self.stage_input_hw(resolution, self.num_stages)
        return [
            LayerSpec(
                "stem", resolution, self.in_channels, self.stem_channels, 3, 0, self.stem_stride, False, self.stem_act
            ),
            LayerSpec("first", hw, self.stem_channels, self.first_channels, 3, 0, 1, False, "relu"),
            LayerSpec(
                "final_expand", last, self.stage_channels[-1], self.final_expand_channels, 1, 0, 1, False, self.head_act
            ),
            LayerSpec(
                "head",
                last,
                self.final_expand_channels,
                self.num_classes,
                1,
                self.feature_channels,
                1,
                False,
                self.head_act,
            ),
        ]

    def layers(self, arch: Arch) -> list[LayerSpec]:
        """Every layer the subnet runs, in order, at its input shape."""
        stem, first, final, head = self.fixed_layers(arch.resolution)
        blocks = [
            self.block_spec(
                arch.resolution, s, j, arch.kernels[s * self.max_depth + j], arch.expands[s * self.max_depth + j]
            )
            for s in range(self.num_stages)
            for j in range(arch.depths[s])
        ]
        return [stem, first, *blocks, final, head]

    def macs(self, arch: Arch) -> int:
        return sum(layer.macs for layer in self.layers(arch))

    def params(self, arch: Arch) -> int:
        return sum(layer.params for layer in self.layers(arch))

    def iter_blocks(self, arch: Arch) -> Iterator[tuple[int, int, LayerSpec]]:
        """(stage, index, spec) for each elastic block the arch runs."""
        specs = iter(lay for lay in self.layers(arch) if lay.kind == "mbconv")
        for s in range(self.num_stages):
            for j in range(arch.depths[s]):
                yield s, j, next(specs)


def _parse_stages(value: Any, source: str) -> tuple[StageSpec, ...]:
    if not isinstance(value, list) or not value:
        raise SpaceError(f"{source}: expected a non-empty list of stages")
    stages = []
    for i, st in enumerate(value):
        where = f"{source}[{i}]"
        if not isinstance(st, Mapping):
            raise SpaceError(f"{where}: expected a mapping with width, stride, se, act")
        unknown = sorted(set(st) - {"width", "stride", "se", "act"})
        if unknown:
            raise SpaceError(f"{where}.{unknown[0]}: unknown key (allowed: width, stride, se, act)")
        for key in ("width", "stride"):
            if not isinstance(st.get(key), int) or isinstance(st.get(key), bool):
                raise SpaceError(f"{where}.{key}: expected an integer, got {st.get(key)!r}")
        se = st.get("se", False)
        if not isinstance(se, bool):
            raise SpaceError(f"{where}.se: expected true or false, got {se!r}")
        act = st.get("act", "relu")
        if act not in ACTIVATIONS:
            raise SpaceError(f"{where}.act: {act!r} is not one of {list(ACTIVATIONS)}")
        stages.append(StageSpec(st["width"], st["stride"], se, act))
    return tuple(stages)
