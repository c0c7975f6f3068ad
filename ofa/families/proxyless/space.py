"""The OFA-ProxylessNAS search space: the one definition of the skeleton every other module of the family reads.

As the official ``OFAProxylessNASNets``: a 3x3 stem, a fixed 3x3 depthwise-separable first block, elastic
stages of inverted residuals (kernel, expand ratio, depth), the last stage a single elastic block, then
a 1x1 feature-mix conv + BN + ReLU6 before global pooling and the classifier. ReLU6 everywhere, no SE.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ofa.families.choices import fmt_choices, parse_int_tuple
from ofa.families.mbv3.layers import mid_channels
from ofa.families.mobile_space import MobileSpaceMixin
from ofa.families.proxyless.arch import FAMILY, ProxylessArch
from ofa.families.proxyless.layers import LayerSpec
from ofa.utils.errors import SpaceError


@dataclass(frozen=True)
class StageSpec:
    """One stage: output width (at width multiplier 1) and stride of its first block."""

    width: int
    stride: int


PROXYLESS_STAGES = tuple(
    StageSpec(w, s) for w, s in zip((24, 40, 80, 96, 192, 320), (2, 2, 2, 1, 2, 1))
)  # the official ProxylessNAS stage widths and strides
PAPER_RESOLUTIONS = tuple(range(128, 225, 4))
PRESETS = {"ofa_proxyless_d234_e346_k357_w1.3": {"width_mult": 1.3}}  # the published supernet
ELASTIC_DIMS = ("kernels", "expands", "depths", "resolutions")
_SPACE_FIELDS = (
    "stages",
    *ELASTIC_DIMS,
    "stem_width",
    "stem_stride",
    "first_width",
    "feature_width",
    "width_mult",
    "in_channels",
    "num_classes",
    "dropout",
)


@dataclass(frozen=True)
class ProxylessSpace(MobileSpaceMixin):
    """Elastic ProxylessNAS space: fixed skeleton plus kernel/expand/depth/resolution choices.

    Widths are given at width multiplier 1 and rounded to multiples of 8 after scaling, as the
    official code does (the feature width included: 1664 at 1.3). Every stage but the last has an
    elastic depth; the last runs one block.
    """

    RECORDED_FAMILY = FAMILY

    stages: tuple[StageSpec, ...] = PROXYLESS_STAGES
    kernels: tuple[int, ...] = (3, 5, 7)
    expands: tuple[int, ...] = (3, 4, 6)
    depths: tuple[int, ...] = (2, 3, 4)
    resolutions: tuple[int, ...] = PAPER_RESOLUTIONS
    stem_width: int = 32
    stem_stride: int = 2
    first_width: int = 16
    feature_width: int = 1280
    width_mult: float = 1.0
    in_channels: int = 3
    num_classes: int = 1000
    dropout: float = 0.1

    def __post_init__(self) -> None:
        self._check()

    # ----------------------------------------------------------------- construction
    @classmethod
    def preset(cls, name: str = "ofa_proxyless_d234_e346_k357_w1.3") -> ProxylessSpace:
        """A published space by its name (`PRESETS`)."""
        if name not in PRESETS:
            raise SpaceError(f"preset: unknown preset {name!r} (allowed: {', '.join(PRESETS)})")
        return cls(**PRESETS[name])

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "space") -> ProxylessSpace:
        """Build from a recipe's ``space:`` mapping (``family: proxyless``, optional ``preset``, any field)."""
        if not isinstance(d, Mapping):
            raise SpaceError(f"{source}: expected a mapping")
        d = dict(d)
        family = d.pop("family", FAMILY)
        if family != FAMILY:
            raise SpaceError(f"{source}.family: expected {FAMILY!r}, got {family!r}")
        preset = d.pop("preset", None)
        unknown = sorted(set(d) - set(_SPACE_FIELDS))
        if unknown:
            allowed = ", ".join(("family", "preset", *_SPACE_FIELDS))
            raise SpaceError(f"{source}.{unknown[0]}: unknown key (allowed: {allowed})")
        if preset is not None and preset not in PRESETS:
            raise SpaceError(f"{source}.preset: unknown preset {preset!r} (allowed: {', '.join(PRESETS)})")
        kwargs: dict[str, Any] = dict(PRESETS[preset]) if preset else {}
        for name, value in d.items():
            kwargs[name] = _parse_field(name, value, f"{source}.{name}")
        try:
            return cls(**kwargs)
        except SpaceError as exc:
            raise SpaceError(f"{source}.{exc}") from None

    def _check(self) -> None:
        def fail(name: str, msg: str) -> None:
            raise SpaceError(f"{name}: {msg}")

        if len(self.stages) < 2:
            fail("stages", "at least two stages are required (the last runs a single block)")
        for i, s in enumerate(self.stages):
            if s.width < 1:
                fail(f"stages[{i}].width", f"must be positive, got {s.width}")
            if s.stride not in (1, 2):
                fail(f"stages[{i}].stride", f"must be 1 or 2, got {s.stride}")
        for name in ELASTIC_DIMS:
            values = getattr(self, name)
            if not values:
                fail(name, "needs at least one choice")
            if len(set(values)) != len(values) or list(values) != sorted(values):
                fail(name, f"choices must be increasing and distinct, got {list(values)}")
            if min(values) < 1:
                fail(name, f"choices must be positive, got {list(values)}")
        if any(k % 2 == 0 for k in self.kernels):
            fail("kernels", f"kernel sizes must be odd, got {list(self.kernels)}")
        for name in ("stem_width", "first_width", "feature_width", "in_channels", "num_classes"):
            if getattr(self, name) < 1:
                fail(name, f"must be positive, got {getattr(self, name)}")
        if self.stem_stride not in (1, 2):
            fail("stem_stride", f"must be 1 or 2, got {self.stem_stride}")
        if self.width_mult <= 0:
            fail("width_mult", f"must be positive, got {self.width_mult}")
        if not 0 <= self.dropout < 1:
            fail("dropout", f"must be in [0, 1), got {self.dropout}")

    def elastic_dims(self) -> dict[str, tuple[int, ...]]:
        """The dimensions a training phase can restrict, with their choices."""
        return {name: getattr(self, name) for name in ELASTIC_DIMS}

    # ----------------------------------------------------------------- derived widths
    @property
    def num_slots(self) -> int:
        """Block slots: ``max_depth`` per stage but the last, which has one."""
        return (self.num_stages - 1) * self.max_depth + 1

    def stage_slots(self, stage: int) -> int:
        """Block slots of ``stage`` (the supernet's blocks there)."""
        return 1 if stage == self.num_stages - 1 else self.max_depth

    def slot(self, stage: int, index: int) -> int:
        return stage * self.max_depth + index

    def block_io(self, stage: int, index: int) -> tuple[int, int, int]:
        """(in_channels, out_channels, stride) of block ``index`` of ``stage``."""
        widths = self.stage_channels
        in_c = (self.first_channels if stage == 0 else widths[stage - 1]) if index == 0 else widths[stage]
        return in_c, widths[stage], self.stages[stage].stride if index == 0 else 1

    # ----------------------------------------------------------------- archs
    def uniform_arch(self, resolution: int, kernel: int, expand: int, depth: int) -> ProxylessArch:
        """The subnet that makes the same choice in every stage and block (not checked against the space)."""
        n = self.num_slots
        return ProxylessArch(resolution, (depth,) * (self.num_stages - 1) + (1,), (kernel,) * n, (expand,) * n)

    def max_arch(self, resolution: int | None = None) -> ProxylessArch:
        r = max(self.resolutions) if resolution is None else resolution
        return self.uniform_arch(r, max(self.kernels), max(self.expands), max(self.depths))

    def min_arch(self, resolution: int | None = None) -> ProxylessArch:
        r = min(self.resolutions) if resolution is None else resolution
        return self.uniform_arch(r, min(self.kernels), min(self.expands), min(self.depths))

    def stamp(self, arch: ProxylessArch) -> ProxylessArch:
        """``arch`` marked as belonging to this space (its JSON then carries the fingerprint)."""
        return replace(arch, space=self.fingerprint())

    def validate(self, arch: ProxylessArch, source: str = "arch") -> ProxylessArch:
        """Return ``arch`` if it belongs to this space, else raise ``SpaceError`` naming the first bad field.

        An arch stamped with another space's fingerprint is refused even when its values fit.
        """
        if arch.space is not None and arch.space != self.fingerprint():
            raise SpaceError(
                f"{source}: the arch was chosen in space {arch.space}, but this space is {self.fingerprint()}"
            )
        return self.check_choices(arch, source)

    def check_choices(self, arch: ProxylessArch, source: str = "arch") -> ProxylessArch:
        """Return ``arch`` if every value is a choice of this space (shape and values; no fingerprint)."""
        if not isinstance(arch, ProxylessArch):
            raise SpaceError(f"{source}: a {type(arch).__name__} is not an OFA-ProxylessNAS arch")
        if arch.resolution not in self.resolutions:
            raise SpaceError(f"{source}.resolution: {arch.resolution} is not one of {fmt_choices(self.resolutions)}")
        last = self.num_stages - 1
        for name, values, length, choices in (
            ("depths", arch.depths, self.num_stages, self.depths),
            ("kernels", arch.kernels, self.num_slots, self.kernels),
            ("expands", arch.expands, self.num_slots, self.expands),
        ):
            if len(values) != length:
                raise SpaceError(f"{source}.{name}: expected {length} values for this space, got {len(values)}")
            for i, v in enumerate(values):
                allowed = (1,) if name == "depths" and i == last else choices
                if v not in allowed:
                    raise SpaceError(f"{source}.{name}[{i}]: {v} is not one of {list(allowed)}")
        return arch

    def count(self) -> int:
        """Number of distinct subnets per resolution (unused slots do not count)."""
        per_block = len(self.kernels) * len(self.expands)
        per_stage = sum(per_block**d for d in self.depths)
        return per_stage ** (self.num_stages - 1) * per_block

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
        hw = self.stage_input_hw(resolution, stage + (index > 0))
        return LayerSpec("mbconv", hw, in_c, out_c, kernel, mid_channels(in_c, expand), stride)

    def fixed_layers(self, resolution: int) -> list[LayerSpec]:
        """Layers every subnet at ``resolution`` runs: stem, first block, head."""
        hw, last = self.stage_input_hw(resolution, 0), self.stage_input_hw(resolution, self.num_stages)
        return [
            LayerSpec("stem", resolution, self.in_channels, self.stem_channels, 3, 0, self.stem_stride),
            LayerSpec("first", hw, self.stem_channels, self.first_channels, 3, 0, 1),
            LayerSpec("head", last, self.stage_channels[-1], self.num_classes, 1, self.feature_channels, 1),
        ]

    def iter_blocks(self, arch: ProxylessArch) -> Iterator[tuple[int, int, LayerSpec]]:
        """(stage, index, spec) for each elastic block the arch runs, in order."""
        for s in range(self.num_stages):
            for j in range(arch.depths[s]):
                slot = self.slot(s, j)
                yield s, j, self.block_spec(arch.resolution, s, j, arch.kernels[slot], arch.expands[slot])

    def layers(self, arch: ProxylessArch) -> list[LayerSpec]:
        """Every layer the subnet runs, in order, at its input shape."""
        stem, first, head = self.fixed_layers(arch.resolution)
        return [stem, first, *(spec for _, _, spec in self.iter_blocks(arch)), head]

    def macs(self, arch: ProxylessArch) -> int:
        return sum(layer.macs for layer in self.layers(arch))

    def params(self, arch: ProxylessArch) -> int:
        return sum(layer.params for layer in self.layers(arch))


def _parse_field(name: str, value: Any, source: str) -> Any:
    """One ``space:`` field's value, type-checked (the space's own checks run after)."""
    if name == "stages":
        return _parse_stages(value, source)
    if name in ELASTIC_DIMS:
        return parse_int_tuple(value, source)
    if name in ("width_mult", "dropout"):
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise SpaceError(f"{source}: expected a number, got {value!r}")
        return float(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise SpaceError(f"{source}: expected an integer, got {value!r}")
    return value


def _parse_stages(value: Any, source: str) -> tuple[StageSpec, ...]:
    if not isinstance(value, list) or not value:
        raise SpaceError(f"{source}: expected a non-empty list of stages")
    stages = []
    for i, st in enumerate(value):
        where = f"{source}[{i}]"
        if not isinstance(st, Mapping):
            raise SpaceError(f"{where}: expected a mapping with width, stride")
        unknown = sorted(set(st) - {"width", "stride"})
        if unknown:
            raise SpaceError(f"{where}.{unknown[0]}: unknown key (allowed: width, stride)")
        for key in ("width", "stride"):
            if not isinstance(st.get(key), int) or isinstance(st.get(key), bool):
                raise SpaceError(f"{where}.{key}: expected an integer, got {st.get(key)!r}")
        stages.append(StageSpec(st["width"], st["stride"]))
    return tuple(stages)
