"""The search space and its architectures: the one definition every other module reads.

The supernet, the static subnet builder, the MACs/params counter, the latency-table key builder
and the search encoder all derive what they need from ``SearchSpace`` and ``Arch`` here.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
from timm.layers import make_divisible

from ofa import official_encoding
from ofa.errors import SpaceError

ACTIVATIONS = ("relu", "hswish")
SE_RATIO = 0.25


def _rng(rng: np.random.Generator | int | None) -> np.random.Generator:
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def mid_channels(in_channels: int, expand: float) -> int:
    """Expanded width of an inverted-residual block, rounded exactly as timm rounds it."""
    return make_divisible(in_channels * expand)


def se_channels(mid: int) -> int:
    """Squeeze-excite bottleneck width (timm's MobileNetV3 rule: a quarter of mid, divisible by 8)."""
    return make_divisible(mid * SE_RATIO)


@dataclass(frozen=True)
class StageSpec:
    """One elastic stage: output width, stride of its first block, squeeze-excite, activation."""

    width: int
    stride: int
    se: bool
    act: str


@dataclass(frozen=True)
class LayerSpec:
    """One layer config at its input shape: the unit of MACs, params and latency tables.

    kinds: ``stem`` (conv+BN+act), ``first`` (fixed depthwise-separable block), ``mbconv`` (elastic
    inverted residual), ``final_expand`` (1x1 conv+BN+act), ``head`` (pool, 1x1 feature mix and act,
    classifier; ``mid`` is the feature width, ``out_c`` the number of classes).
    """

    kind: str
    in_hw: int
    in_c: int
    out_c: int
    kernel: int = 1
    mid: int = 0
    stride: int = 1
    se: bool = False
    act: str = "relu"

    @property
    def out_hw(self) -> int:
        return 1 if self.kind == "head" else (self.in_hw - 1) // self.stride + 1

    @property
    def key(self) -> str:
        return (
            f"{self.kind}:in={self.in_hw}x{self.in_hw}x{self.in_c}:out={self.out_c}:k={self.kernel}"
            f":mid={self.mid}:s={self.stride}:se={int(self.se)}:act={self.act}"
        )

    @classmethod
    def from_key(cls, key: str) -> LayerSpec:
        kind, *parts = key.split(":")
        values = dict(p.split("=", 1) for p in parts)
        hw, _, c = values["in"].split("x")
        return cls(
            kind=kind, in_hw=int(hw), in_c=int(c), out_c=int(values["out"]), kernel=int(values["k"]),
            mid=int(values["mid"]), stride=int(values["s"]), se=values["se"] == "1", act=values["act"],
        )

    @property
    def macs(self) -> int:
        """Multiply-accumulates of convolutions and linears (what FlopCounterMode counts, halved)."""
        o2, i2 = self.out_hw**2, self.in_hw**2
        k2 = self.kernel**2
        if self.kind in ("stem", "final_expand"):
            return o2 * self.in_c * self.out_c * k2
        if self.kind == "first":
            return o2 * self.in_c * k2 + o2 * self.in_c * self.out_c
        if self.kind == "mbconv":
            m = self.mid
            se = 2 * m * se_channels(m) if self.se else 0
            return i2 * self.in_c * m + o2 * m * k2 + se + o2 * m * self.out_c
        if self.kind == "head":
            return self.in_c * self.mid + self.mid * self.out_c
        raise SpaceError(f"unknown layer kind {self.kind!r}")

    @property
    def params(self) -> int:
        """Trainable parameters (conv weights, BN affine, SE biases, classifier bias)."""
        k2 = self.kernel**2
        if self.kind in ("stem", "final_expand"):
            return self.in_c * self.out_c * k2 + 2 * self.out_c
        if self.kind == "first":
            return self.in_c * k2 + 2 * self.in_c + self.in_c * self.out_c + 2 * self.out_c
        if self.kind == "mbconv":
            m = self.mid
            se = 2 * m * se_channels(m) + se_channels(m) + m if self.se else 0
            return self.in_c * m + 2 * m + m * k2 + 2 * m + se + m * self.out_c + 2 * self.out_c
        if self.kind == "head":
            return self.in_c * self.mid + self.mid * self.out_c + self.out_c
        raise SpaceError(f"unknown layer kind {self.kind!r}")


@dataclass(frozen=True)
class Arch:
    """One subnet: resolution, depth per stage, kernel and expand per block slot.

    Slots are ``stage * max_depth + index``; slots past a stage's depth are ignored but kept, so
    every arch of a space has the same shape. ``extra`` carries optional fields written by search
    and export (predicted_top1, latency_ms, macs, params, lut) and is not part of identity.
    """

    resolution: int
    depths: tuple[int, ...]
    kernels: tuple[int, ...]
    expands: tuple[int, ...]
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "resolution": int(self.resolution),
            "depths": [int(d) for d in self.depths],
            "kernels": [int(k) for k in self.kernels],
            "expands": [int(e) for e in self.expands],
            **self.extra,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "arch") -> Arch:
        if not isinstance(d, Mapping):
            raise SpaceError(f"{source}: expected a JSON object with resolution/depths/kernels/expands")
        missing = [k for k in ("resolution", "depths", "kernels", "expands") if k not in d]
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
        extra = {k: v for k, v in d.items() if k not in ("resolution", "depths", "kernels", "expands")}
        return cls(res, ints("depths"), ints("kernels"), ints("expands"), extra)

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str, source: str = "arch") -> Arch:
        try:
            return cls.from_dict(json.loads(text), source)
        except json.JSONDecodeError as exc:
            raise SpaceError(f"{source}: invalid JSON: {exc}") from None

    @classmethod
    def load(cls, path: str | Path) -> Arch:
        path = Path(path)
        if not path.is_file():
            raise SpaceError(f"{path}: arch file not found")
        return cls.from_json(path.read_text(), str(path))

    def save(self, path: str | Path) -> Path:
        from ofa.io import write_json

        return write_json(path, self.to_dict())

    def with_extra(self, **extra: Any) -> Arch:
        return replace(self, extra={**self.extra, **extra})

    def short(self) -> str:
        """A compact human-readable name, e.g. ``r16-d2.3.1-k35..-e46..``."""
        return (
            f"r{self.resolution}-d{''.join(map(str, self.depths))}"
            f"-k{''.join(map(str, self.kernels))}-e{''.join(map(str, self.expands))}"
        )

    @classmethod
    def from_ofa_config(cls, config: Mapping[str, Any], resolution: int | Sequence[int] | None = None,
                        source: str = "ofa config") -> Arch:
        """An official once-for-all subnet ``{"ks", "e", "d"}`` at ``resolution`` (int or ``[int]``)."""
        return cls(*official_encoding.from_ofa_config(config, resolution, source))

    def to_ofa_config(self) -> dict[str, Any]:
        """The official once-for-all encoding ``{"ks", "e", "d", "r"}`` of this arch."""
        return official_encoding.to_ofa_config(self.resolution, self.depths, self.kernels, self.expands)


_SPACE_FIELDS = (
    "stages", "kernels", "expands", "depths", "resolutions", "stem_width", "stem_stride",
    "stem_act", "first_width", "final_expand_width", "feature_width", "head_act", "width_mult",
    "in_channels", "num_classes", "dropout",
)


@dataclass(frozen=True)
class SearchSpace:
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
    def mbv3(cls, **overrides: Any) -> SearchSpace:
        """The Once-for-All MobileNetV3 space of the paper (OFA-MBv3, width multiplier 1.0)."""
        stages = (
            StageSpec(24, 2, False, "relu"),
            StageSpec(40, 2, True, "relu"),
            StageSpec(80, 2, False, "hswish"),
            StageSpec(112, 1, True, "hswish"),
            StageSpec(160, 2, True, "hswish"),
        )
        return cls(stages=stages, **overrides)

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
                kwargs[name] = _parse_int_tuple(value, f"{source}.{name}")
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
            return cls.mbv3(**kwargs) if "stages" not in kwargs else cls(**kwargs)
        if "stages" not in kwargs:
            raise SpaceError(f"{source}.stages: missing (or give preset: mbv3)")
        try:
            return cls(**kwargs)
        except SpaceError as exc:
            raise SpaceError(f"{source}.{exc}") from None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "stages":
                value = [{"width": s.width, "stride": s.stride, "se": s.se, "act": s.act} for s in value]
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out

    def fingerprint(self) -> str:
        """Short stable hash of the space; tables, predictors and checkpoints record it."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]

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
        for name in ("stem_width", "first_width", "final_expand_width", "feature_width", "in_channels",
                     "num_classes"):
            if getattr(self, name) < 1:
                fail(name, f"must be positive, got {getattr(self, name)}")
        if self.stem_stride not in (1, 2):
            fail("stem_stride", f"must be 1 or 2, got {self.stem_stride}")
        if self.width_mult <= 0:
            fail("width_mult", f"must be positive, got {self.width_mult}")
        if not 0 <= self.dropout < 1:
            fail("dropout", f"must be in [0, 1), got {self.dropout}")

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
    def final_expand_channels(self) -> int:
        return self._scale(self.final_expand_width)

    @property
    def feature_channels(self) -> int:
        """Scaled by every multiplier, below 1 too, as the official OFAMobileNetV3 does (640 at 0.5)."""
        return self._scale(self.feature_width)

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    @property
    def max_depth(self) -> int:
        return max(self.depths)

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
    def max_arch(self, resolution: int | None = None) -> Arch:
        r = max(self.resolutions) if resolution is None else resolution
        n = self.num_slots
        return Arch(r, (max(self.depths),) * self.num_stages, (max(self.kernels),) * n, (max(self.expands),) * n)

    def min_arch(self, resolution: int | None = None) -> Arch:
        r = min(self.resolutions) if resolution is None else resolution
        n = self.num_slots
        return Arch(r, (min(self.depths),) * self.num_stages, (min(self.kernels),) * n, (min(self.expands),) * n)

    def validate(self, arch: Arch, source: str = "arch") -> Arch:
        """Return ``arch`` if it belongs to this space, else raise naming the first bad field."""
        if arch.resolution not in self.resolutions:
            raise SpaceError(
                f"{source}.resolution: {arch.resolution} is not one of {_fmt_choices(self.resolutions)}"
            )
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

    def sample(self, rng: np.random.Generator | int | None = None, *, kernels: Sequence[int] | None = None,
               expands: Sequence[int] | None = None, depths: Sequence[int] | None = None,
               resolutions: Sequence[int] | None = None) -> Arch:
        """Uniform random arch, optionally restricted to subsets of the choices (a training phase)."""
        rng = _rng(rng)
        ks = list(kernels or self.kernels)
        es = list(expands or self.expands)
        ds = list(depths or self.depths)
        rs = list(resolutions or self.resolutions)
        n = self.num_slots
        return Arch(
            int(rng.choice(rs)),
            tuple(int(d) for d in rng.choice(ds, size=self.num_stages)),
            tuple(int(k) for k in rng.choice(ks, size=n)),
            tuple(int(e) for e in rng.choice(es, size=n)),
        )

    def mutate(self, arch: Arch, rng: np.random.Generator | int | None = None, prob: float = 0.1,
               resolution_prob: float = 0.5) -> Arch:
        """Redraw each gene with probability ``prob`` (resolution with ``resolution_prob``), as OFA."""
        row = self.encode(arch)[None]
        return self.decode(self.mutate_genes(row, _rng(rng), prob, resolution_prob)[0])

    def crossover(self, a: Arch, b: Arch, rng: np.random.Generator | int | None = None) -> Arch:
        """Uniform crossover: each gene from either parent with probability 1/2."""
        rows = np.stack([self.encode(a), self.encode(b)])
        return self.decode(self.crossover_genes(rows[:1], rows[1:], _rng(rng))[0])

    def count(self) -> int:
        """Number of distinct subnets per resolution (unused slots do not count)."""
        per_block = len(self.kernels) * len(self.expands)
        per_stage = sum(per_block**d for d in self.depths)
        return per_stage**self.num_stages

    # ----------------------------------------------------------------- integer encoding
    @property
    def gene_choices(self) -> list[tuple[int, ...]]:
        """Choices of each gene of the integer encoding: resolution, depths, kernels, expands."""
        return (
            [self.resolutions]
            + [self.depths] * self.num_stages
            + [self.kernels] * self.num_slots
            + [self.expands] * self.num_slots
        )

    @property
    def gene_sizes(self) -> np.ndarray:
        return np.array([len(c) for c in self.gene_choices], dtype=np.int64)

    def gene_slices(self) -> dict[str, slice]:
        s, n = self.num_stages, self.num_slots
        return {"resolution": slice(0, 1), "depths": slice(1, 1 + s), "kernels": slice(1 + s, 1 + s + n),
                "expands": slice(1 + s + n, 1 + s + 2 * n)}

    def encode(self, arch: Arch) -> np.ndarray:
        """Arch -> row of choice indices (the search's population format)."""
        self.validate(arch)
        values = [arch.resolution, *arch.depths, *arch.kernels, *arch.expands]
        return np.array([c.index(v) for c, v in zip(self.gene_choices, values)], dtype=np.int64)

    def encode_many(self, archs: Sequence[Arch]) -> np.ndarray:
        return np.stack([self.encode(a) for a in archs]) if archs else np.zeros((0, len(self.gene_sizes)), np.int64)

    def decode(self, row: np.ndarray) -> Arch:
        sl = self.gene_slices()
        vals = [self.gene_choices[i][int(g)] for i, g in enumerate(row)]
        return Arch(vals[0], tuple(vals[sl["depths"]]), tuple(vals[sl["kernels"]]), tuple(vals[sl["expands"]]))

    def sample_genes(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` uniform random archs as an integer array."""
        return (rng.random((n, len(self.gene_sizes))) * self.gene_sizes).astype(np.int64)

    def mutate_genes(self, rows: np.ndarray, rng: np.random.Generator, prob: float = 0.1,
                     resolution_prob: float = 0.5) -> np.ndarray:
        p = np.full(rows.shape[1], prob)
        p[0] = resolution_prob
        redraw = rng.random(rows.shape) < p
        fresh = self.sample_genes(rows.shape[0], rng)
        return np.where(redraw, fresh, rows)

    def crossover_genes(self, a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return np.where(rng.random(a.shape) < 0.5, a, b)

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
            LayerSpec("stem", resolution, self.in_channels, self.stem_channels, 3, 0, self.stem_stride, False,
                      self.stem_act),
            LayerSpec("first", hw, self.stem_channels, self.first_channels, 3, 0, 1, False, "relu"),
            LayerSpec("final_expand", last, self.stage_channels[-1], self.final_expand_channels, 1, 0, 1, False,
                      self.head_act),
            LayerSpec("head", last, self.final_expand_channels, self.num_classes, 1, self.feature_channels, 1,
                      False, self.head_act),
        ]

    def layers(self, arch: Arch) -> list[LayerSpec]:
        """Every layer the subnet runs, in order, at its input shape."""
        stem, first, final, head = self.fixed_layers(arch.resolution)
        blocks = [
            self.block_spec(arch.resolution, s, j, arch.kernels[s * self.max_depth + j],
                            arch.expands[s * self.max_depth + j])
            for s in range(self.num_stages) for j in range(arch.depths[s])
        ]
        return [stem, first, *blocks, final, head]

    def macs(self, arch: Arch) -> int:
        return sum(layer.macs for layer in self.layers(arch))

    def params(self, arch: Arch) -> int:
        return sum(layer.params for layer in self.layers(arch))

    def block_strings(self, arch: Arch) -> list[list[str]]:
        """timm arch-definition strings, one list per stage: fixed first block, elastic stages, final."""
        def act(name: str) -> str:
            return "_nre" if name == "relu" else "_nhs"

        stages = [[f"ds_r1_k3_s1_e1_c{self.first_channels}_nre"]] + [[] for _ in self.stages]
        for s, _, spec in self.iter_blocks(arch):
            se = "_se0.25" if spec.se else ""
            expand = arch.expands[s * self.max_depth + len(stages[s + 1])]
            stages[s + 1].append(f"ir_r1_k{spec.kernel}_s{spec.stride}_e{expand}_c{spec.out_c}{se}{act(spec.act)}")
        stages.append([f"cn_r1_k1_s1_c{self.final_expand_channels}{act(self.head_act)}"])
        return stages

    def iter_blocks(self, arch: Arch) -> Iterator[tuple[int, int, LayerSpec]]:
        """(stage, index, spec) for each elastic block the arch runs."""
        specs = iter(lay for lay in self.layers(arch) if lay.kind == "mbconv")
        for s in range(self.num_stages):
            for j in range(arch.depths[s]):
                yield s, j, next(specs)


def _fmt_choices(values: Sequence[int]) -> str:
    values = list(values)
    if len(values) > 6:
        steps = {b - a for a, b in itertools.pairwise(values)}
        if len(steps) == 1:
            return f"{values[0]}..{values[-1]} step {steps.pop()}"
    return str(values)


def _parse_int_tuple(value: Any, source: str) -> tuple[int, ...]:
    if isinstance(value, Mapping) and set(value) <= {"start", "stop", "step"}:
        try:
            return tuple(range(int(value["start"]), int(value["stop"]) + 1, int(value.get("step", 1))))
        except (KeyError, TypeError, ValueError):
            raise SpaceError(f"{source}: range needs integer start, stop and optional step") from None
    if not isinstance(value, list | tuple) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise SpaceError(f"{source}: expected a list of integers, got {value!r}")
    return tuple(value)


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

