"""A toy supernet family, written outside the library: a plain CNN with elastic width and depth per stage.

What ``docs/families.md`` asks of a family, in one file: a stem conv-BN-ReLU, stages of conv-BN-ReLU
blocks (each stage picks its width and its depth), global average pooling and a linear classifier.
Static subnets are timm ``ByobNet``s whose blocks are timm's ``ConvNormAct`` (the stem too), with no
final conv and timm's ``ClassifierHead``. The tests at the end register it and take it through
every stage of the pipeline.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
import yaml
from helpers import FAST, known_call_ms, onnx_top1, perturb
from timm.layers import ClassifierHead, ConvNormAct
from timm.models.byobnet import ByoBlockCfg, ByobNet, ByoModelCfg
from torch import nn

from ofa.data.datasets import data_from_meta
from ofa.export.export import ExportConfig, export_subnet
from ofa.families import registry
from ofa.families.counts import count_macs, count_params
from ofa.families.family import Family, TimmFolder
from ofa.families.genes import CostTerm, GeneLayoutBase, frozen_ints
from ofa.families.subnet_file import load_subnet
from ofa.families.supernet_file import SUPERNET_FORMAT, read_record
from ofa.lut.build import TableBuildConfig, build_table
from ofa.lut.layer_models import layer_specs
from ofa.pipeline import Pipeline, PipelineConfig, round_up
from ofa.train.bn import resize
from ofa.utils.errors import OFAError, SpaceError
from ofa.utils.io import read_json, save_torch, write_json
from search.dense import macs_model, params_model
from search.evolution import cheapest_rows
from search.latency import LatencyTable
from search.predictor.model import AccuracyPredictor

NAME = "toy"
KERNEL = 3  # every conv is 3x3 with padding 1, as timm's ConvNormAct pads it
STEM_STRIDE = 2  # timm's ByobNet stem ('3x3', no pool) has stride 2


def _ints(value: Any, source: str) -> tuple[int, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise SpaceError(f"{source}: expected a list of integers, got {value!r}")
    return tuple(value)


# ------------------------------------------------------------------------------------------- arch
@dataclass(frozen=True)
class ToyArch:
    """One subnet: resolution, then per stage its depth and its width (``extra`` and ``space`` as mbv3's)."""

    resolution: int
    depths: tuple[int, ...]
    widths: tuple[int, ...]
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)
    space: str | None = field(default=None, compare=False, hash=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "family": NAME,
            "resolution": int(self.resolution),
            "depths": [int(d) for d in self.depths],
            "widths": [int(w) for w in self.widths],
        }
        if self.space is not None:
            out["space"] = self.space
        return {**out, **self.extra}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "arch") -> ToyArch:
        if not isinstance(d, Mapping):
            raise SpaceError(f"{source}: expected a JSON object with resolution/depths/widths")
        missing = [k for k in ("resolution", "depths", "widths") if k not in d]
        if missing:
            raise SpaceError(f"{source}: missing field {missing[0]!r}")
        res = d["resolution"]
        if not isinstance(res, int) or isinstance(res, bool):
            raise SpaceError(f"{source}.resolution: expected an integer, got {res!r}")
        extra = {k: v for k, v in d.items() if k not in ("family", "resolution", "depths", "widths", "space")}
        depths, widths = _ints(d["depths"], f"{source}.depths"), _ints(d["widths"], f"{source}.widths")
        return cls(res, depths, widths, extra, d.get("space"))

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str, source: str = "arch") -> ToyArch:
        return cls.from_dict(json.loads(text), source)

    def save(self, path: str | Path) -> Path:
        return write_json(path, self.to_dict())

    def with_extra(self, extra: Mapping[str, Any]) -> ToyArch:
        return replace(self, extra={**self.extra, **extra})

    def short(self) -> str:
        return f"r{self.resolution}-d{''.join(map(str, self.depths))}-w{'.'.join(map(str, self.widths))}"

    @classmethod
    def from_ofa_config(cls, config: Mapping[str, Any], resolution: Any = None, source: str = "ofa config") -> ToyArch:
        raise SpaceError(f"{source}: the toy family has no official once-for-all subnets")

    def to_ofa_config(self) -> dict[str, Any]:
        raise SpaceError("the toy family has no official once-for-all encoding")


# ------------------------------------------------------------------------------------------- layers
@dataclass(frozen=True)
class ToyLayer:
    """One layer config: ``stem`` and ``conv`` (3x3 conv, BN, ReLU) or ``head`` (pool, linear)."""

    kind: str
    in_hw: int
    in_c: int
    out_c: int
    stride: int = 1

    @property
    def out_hw(self) -> int:
        return 1 if self.kind == "head" else (self.in_hw - 1) // self.stride + 1

    @property
    def key(self) -> str:
        return f"{self.kind}:in={self.in_hw}x{self.in_hw}x{self.in_c}:out={self.out_c}:s={self.stride}"

    @classmethod
    def from_key(cls, key: str) -> ToyLayer:
        kind, *parts = key.split(":")
        values = dict(p.split("=", 1) for p in parts)
        hw, _, c = values["in"].split("x")
        return cls(kind, int(hw), int(c), int(values["out"]), int(values["s"]))

    def card_cells(self) -> dict[str, str]:
        return {"kernel": "" if self.kind == "head" else str(KERNEL), "stride": str(self.stride)}

    @property
    def macs(self) -> int:
        if self.kind == "head":
            return self.in_c * self.out_c
        return self.out_hw**2 * self.in_c * self.out_c * KERNEL**2

    @property
    def params(self) -> int:
        if self.kind == "head":
            return self.in_c * self.out_c + self.out_c
        return self.in_c * self.out_c * KERNEL**2 + 2 * self.out_c  # conv without bias, BN affine


# ------------------------------------------------------------------------------------------- space
_FIELDS = ("strides", "widths", "depths", "resolutions", "stem_width", "in_channels", "num_classes")


@dataclass(frozen=True)
class ToySpace:
    """Stages (one stride each) that each take one of ``widths`` and one of ``depths``; widths are multiples of 8
    (ByobNet rounds stage widths to them)."""

    strides: tuple[int, ...] = (1, 2)
    widths: tuple[int, ...] = (8, 16)
    depths: tuple[int, ...] = (1, 2)
    resolutions: tuple[int, ...] = (6, 8)
    stem_width: int = 8
    in_channels: int = 1
    num_classes: int = 4

    def __post_init__(self) -> None:
        for name in ("strides", "widths", "depths", "resolutions"):
            values = getattr(self, name)
            if not values or (name != "strides" and list(values) != sorted(set(values))) or min(values) < 1:
                raise SpaceError(f"{name}: expected increasing positive choices, got {list(values)}")
        if any(w % 8 for w in self.widths):
            raise SpaceError(f"widths: ByobNet rounds widths to multiples of 8, got {list(self.widths)}")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "space") -> ToySpace:
        if not isinstance(d, Mapping):
            raise SpaceError(f"{source}: expected a mapping")
        d = {k: v for k, v in d.items() if k != "family"}
        unknown = sorted(set(d) - set(_FIELDS))
        if unknown:
            raise SpaceError(f"{source}.{unknown[0]}: unknown key (allowed: {', '.join(_FIELDS)})")
        kwargs: dict[str, Any] = {}
        for name, value in d.items():
            if name in ("strides", "widths", "depths", "resolutions"):
                kwargs[name] = _ints(value, f"{source}.{name}")
            elif not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SpaceError(f"{source}.{name}: expected a positive integer, got {value!r}")
            else:
                kwargs[name] = value
        try:
            return cls(**kwargs)
        except SpaceError as exc:
            raise SpaceError(f"{source}.{exc}") from None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"family": NAME}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]

    @property
    def num_stages(self) -> int:
        return len(self.strides)

    def elastic_dims(self) -> dict[str, tuple[int, ...]]:
        return {"widths": self.widths, "depths": self.depths, "resolutions": self.resolutions}

    def uniform_arch(self, resolution: int, width: int, depth: int) -> ToyArch:
        return ToyArch(resolution, (depth,) * self.num_stages, (width,) * self.num_stages)

    def max_arch(self, resolution: int | None = None) -> ToyArch:
        r = max(self.resolutions) if resolution is None else resolution
        return self.uniform_arch(r, max(self.widths), max(self.depths))

    def min_arch(self, resolution: int | None = None) -> ToyArch:
        r = min(self.resolutions) if resolution is None else resolution
        return self.uniform_arch(r, min(self.widths), min(self.depths))

    def stamp(self, arch: ToyArch) -> ToyArch:
        """``arch`` marked as chosen in this space (its file then carries the fingerprint)."""
        return replace(arch, space=self.fingerprint())

    def validate(self, arch: ToyArch, source: str = "arch") -> ToyArch:
        if arch.space is not None and arch.space != self.fingerprint():
            raise SpaceError(f"{source}: the arch was chosen in space {arch.space}, not {self.fingerprint()}")
        return self.check_choices(arch, source)

    def check_choices(self, arch: ToyArch, source: str = "arch") -> ToyArch:
        if arch.resolution not in self.resolutions:
            raise SpaceError(f"{source}.resolution: {arch.resolution} is not one of {list(self.resolutions)}")
        for name, values, choices in (("depths", arch.depths, self.depths), ("widths", arch.widths, self.widths)):
            if len(values) != self.num_stages:
                raise SpaceError(f"{source}.{name}: expected {self.num_stages} values, got {len(values)}")
            for i, v in enumerate(values):
                if v not in choices:
                    raise SpaceError(f"{source}.{name}[{i}]: {v} is not one of {list(choices)}")
        return arch

    def count(self) -> int:
        """Distinct subnets per resolution: every stage's width and depth matter."""
        return (len(self.widths) * len(self.depths)) ** self.num_stages

    def stage_hw(self, resolution: int, stage: int) -> int:
        """Spatial size entering ``stage``."""
        hw = (resolution - 1) // STEM_STRIDE + 1
        for s in self.strides[:stage]:
            hw = (hw - 1) // s + 1
        return hw

    def stem_layer(self, resolution: int) -> list[ToyLayer]:
        return [ToyLayer("stem", resolution, self.in_channels, self.stem_width, STEM_STRIDE)]

    def block_layer(self, resolution: int, stage: int, index: int, in_c: int, out_c: int) -> ToyLayer:
        hw = self.stage_hw(resolution, stage)
        if index == 0:
            return ToyLayer("conv", hw, in_c, out_c, self.strides[stage])
        return ToyLayer("conv", (hw - 1) // self.strides[stage] + 1, in_c, out_c, 1)

    def head_layer(self, resolution: int, in_c: int) -> ToyLayer:
        return ToyLayer("head", self.stage_hw(resolution, self.num_stages), in_c, self.num_classes)

    def layers(self, arch: ToyArch) -> list[ToyLayer]:
        r, out = arch.resolution, self.stem_layer(arch.resolution)
        prev = self.stem_width
        for s, (depth, width) in enumerate(zip(arch.depths, arch.widths)):
            for j in range(depth):
                out.append(self.block_layer(r, s, j, prev, width))
                prev = width
        return [*out, self.head_layer(r, prev)]

    def macs(self, arch: ToyArch) -> int:
        return sum(layer.macs for layer in self.layers(arch))

    def params(self, arch: ToyArch) -> int:
        return sum(layer.params for layer in self.layers(arch))


# ------------------------------------------------------------------------------------------- genes
@dataclass(frozen=True, eq=False)
class ToyLayout(GeneLayoutBase):
    """Columns: resolution, one depth per stage, one width per stage."""

    @classmethod
    def of(cls, space: ToySpace) -> ToyLayout:
        return _layout(space)

    @classmethod
    def build(cls, space: ToySpace) -> ToyLayout:
        n = space.num_stages
        slices = {"resolution": slice(0, 1), "depths": slice(1, 1 + n), "widths": slice(1 + n, 1 + 2 * n)}
        choices = (space.resolutions, *[space.depths] * n, *[space.widths] * n)
        return cls(space, slices, choices, frozen_ints([len(c) for c in choices]))

    def encode(self, arch: ToyArch, source: str = "arch") -> np.ndarray:
        self.space.check_choices(arch, source)
        values = (arch.resolution, *arch.depths, *arch.widths)
        return np.array([c.index(v) for c, v in zip(self.choices, values)], dtype=np.int64)

    def decode(self, row: np.ndarray) -> ToyArch:
        vals = [self.choices[i][int(g)] for i, g in enumerate(np.asarray(row).ravel())]
        return ToyArch(vals[0], tuple(vals[self.slices["depths"]]), tuple(vals[self.slices["widths"]]))

    def active(self, rows: np.ndarray) -> np.ndarray:
        """Every gene matters: each stage runs at least one block at its width."""
        return np.ones(self.as_rows(rows).shape, dtype=bool)

    def every_arch(self, resolution: int) -> Iterator[ToyArch]:
        n = self.space.num_stages
        for depths in itertools.product(self.space.depths, repeat=n):
            for widths in itertools.product(self.space.widths, repeat=n):
                yield ToyArch(resolution, depths, widths)

    @property
    def terms(self) -> tuple[CostTerm, ...]:
        """The stem (by resolution), one term per block slot, the head (by the last stage's width)."""
        return _terms(self)

    def _slots(self) -> list[tuple[int, int]]:
        return [(s, j) for s in range(self.space.num_stages) for j in range(max(self.space.depths))]

    def term_active(self, rows: np.ndarray) -> np.ndarray:
        rows = self.as_rows(rows)
        depth = np.asarray(self.space.depths)[rows[:, self.slices["depths"]]]
        slots = [depth[:, s] > j for s, j in self._slots()]
        ones = np.ones(len(rows), dtype=bool)
        return np.stack([ones, *slots, ones], axis=1)

    def cheapest(self, fixed: np.ndarray, tables: Sequence[np.ndarray]) -> np.ndarray:
        """Exact, by enumeration: the toy space has few subnets per resolution."""
        terms = [t for t in self.terms if t.columns != (self.resolution,)]
        best = []
        for i, r in enumerate(self.space.resolutions):
            rows = self.encode_many(list(self.every_arch(r)))
            active = self.term_active(rows)[:, 1:]
            cost = fixed[i] + sum(
                np.where(active[:, k], table[tuple(rows[:, c] for c in t.columns)], 0.0)
                for k, (t, table) in enumerate(zip(terms, tables))
            )
            best.append(rows[int(np.argmin(cost))])
        return np.stack(best)


def _terms(layout: ToyLayout) -> tuple[CostTerm, ...]:
    space, r = layout.space, layout.resolution
    width = layout.slices["widths"].start

    def block(s: int, j: int) -> CostTerm:
        if j > 0:
            return CostTerm((r, width + s), lambda res, w: [space.block_layer(res, s, j, w, w)])
        if s == 0:
            return CostTerm((r, width), lambda res, w: [space.block_layer(res, 0, 0, space.stem_width, w)])
        return CostTerm((r, width + s - 1, width + s), lambda res, i, w: [space.block_layer(res, s, 0, i, w)])

    last = width + space.num_stages - 1
    head = CostTerm((r, last), lambda res, w: [space.head_layer(res, w)])
    return (CostTerm((r,), space.stem_layer), *(block(s, j) for s, j in layout._slots()), head)


@lru_cache(maxsize=16)
def _layout(space: ToySpace) -> ToyLayout:
    return ToyLayout.build(space)


def sample_arch(
    space: ToySpace,
    rng: np.random.Generator | int | None = None,
    *,
    widths: Sequence[int] | None = None,
    depths: Sequence[int] | None = None,
    resolutions: Sequence[int] | None = None,
) -> ToyArch:
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    n = space.num_stages
    return ToyArch(
        int(rng.choice(list(resolutions or space.resolutions))),
        tuple(int(d) for d in rng.choice(list(depths or space.depths), size=n)),
        tuple(int(w) for w in rng.choice(list(widths or space.widths), size=n)),
    )


class ToyEncoder:
    """The predictor's features: one-hot depth and width per stage, one-hot resolution."""

    def __init__(self, space: ToySpace) -> None:
        self.space, self.layout = space, ToyLayout.of(space)
        self.offsets = np.cumsum([0, *self.layout.sizes[:-1]])
        self.dim = int(self.layout.sizes.sum())

    def encode_rows(self, rows: np.ndarray) -> np.ndarray:
        rows = self.layout.as_rows(rows)
        out = np.zeros((len(rows), self.dim), dtype=np.float32)
        out[np.arange(len(rows))[:, None], self.offsets + rows] = 1.0
        return out

    def encode(self, archs: ToyArch | Sequence[ToyArch]) -> np.ndarray:
        archs = [archs] if isinstance(archs, ToyArch) else list(archs)
        return self.encode_rows(self.layout.encode_many(archs))


# ------------------------------------------------------------------------------------------- timm subnets
def _conv_block(in_chs: int, out_chs: int, stride: int, layers: Any, **_: Any) -> nn.Module:
    """A ByobNet block that is one conv-BN-ReLU (timm's ConvNormAct)."""
    return layers.conv_norm_act(in_chs, out_chs, KERNEL, stride=stride)


def timm_args(space: ToySpace, arch: ToyArch) -> dict[str, Any]:
    return {
        "stem_chs": space.stem_width,
        "stages": [[d, w, s] for d, w, s in zip(arch.depths, arch.widths, space.strides)],
        "num_classes": space.num_classes,
        "in_chans": space.in_channels,
    }


def timm_model(args: dict[str, Any]) -> ByobNet:
    blocks = tuple(ByoBlockCfg(type=partial(_conv_block), d=d, c=c, s=s) for d, c, s in args["stages"])
    cfg = ByoModelCfg(blocks=blocks, stem_type="3x3", stem_pool="", stem_chs=args["stem_chs"], num_features=0)
    return ByobNet(cfg, num_classes=args["num_classes"], in_chans=args["in_chans"])


def build_subnet(space: ToySpace, arch: ToyArch) -> ByobNet:
    return timm_model(timm_args(space, space.validate(arch)))


SNIPPET = """\
import json
from functools import partial

from safetensors.torch import load_file
from timm.models.byobnet import ByoBlockCfg, ByobNet, ByoModelCfg

a = json.load(open("{config}"))["{key}"]
conv = partial(lambda in_chs, out_chs, stride, layers, **_: layers.conv_norm_act(in_chs, out_chs, 3, stride=stride))
blocks = tuple(ByoBlockCfg(type=conv, d=d, c=c, s=s) for d, c, s in a["stages"])
cfg = ByoModelCfg(blocks=blocks, stem_type="3x3", stem_pool="", stem_chs=a["stem_chs"], num_features=0)
model = ByobNet(cfg, num_classes=a["num_classes"], in_chans=a["in_chans"])
model.load_state_dict(load_file("{weights}"))
model.eval()
"""

TOY_FOLDER = TimmFolder(
    key="timm_byobnet",
    architecture="byobnet_toy_subnet",
    holds="ByobNet stem and stage arguments",
    snippet=SNIPPET,
    first_conv="stem.conv",
    classifier="head.fc",
    num_features=lambda model: model.num_features,  # the last stage's width, an arch gene
)


def layer_module(space: ToySpace, spec: ToyLayer) -> nn.Module:
    """The timm module a subnet runs for ``spec`` (the same constructors ByobNet calls)."""
    if spec.kind == "head":
        return ClassifierHead(spec.in_c, spec.out_c, pool_type="avg")
    return ConvNormAct(spec.in_c, spec.out_c, KERNEL, stride=spec.stride)


# ------------------------------------------------------------------------------------------- supernet
class ElasticBN(nn.BatchNorm2d):
    """BatchNorm over the first channels of its input (BN recalibration hooks it as any BN)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = x.shape[1]
        mean, var = self.running_mean[:c], self.running_var[:c]  # views: training updates the prefix
        return F.batch_norm(x, mean, var, self.weight[:c], self.bias[:c], self.training, self.momentum, self.eps)


class ElasticConv(nn.Module):
    """conv-BN-ReLU at its largest width, running the first ``out_c`` output channels."""

    def __init__(self, in_c: int, out_c: int, stride: int) -> None:
        super().__init__()
        self.stride, self.out_c = stride, out_c
        self.conv = nn.Conv2d(in_c, out_c, KERNEL, stride, KERNEL // 2, bias=False)
        self.bn = ElasticBN(out_c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.conv.weight[: self.out_c, : x.shape[1]]
        return F.relu(self.bn(F.conv2d(x, w, None, self.stride, KERNEL // 2)))

    def active_state(self, in_c: int) -> dict[str, torch.Tensor]:
        c = self.out_c
        state = {"conv.weight": self.conv.weight[:c, :in_c]}
        state.update({f"bn.{k}": getattr(self.bn, k)[:c] for k in ("weight", "bias", "running_mean", "running_var")})
        state["bn.num_batches_tracked"] = self.bn.num_batches_tracked
        return {k: v.detach().clone() for k, v in state.items()}


class ToySupernet(nn.Module):
    """Every stage at its largest width and depth; the stem is timm's ConvNormAct, the head a linear."""

    def __init__(self, space: ToySpace) -> None:
        super().__init__()
        self.space, self.meta = space, {}
        self.stem = ConvNormAct(space.in_channels, space.stem_width, KERNEL, stride=STEM_STRIDE)
        top, ins = max(space.widths), (space.stem_width, *[max(space.widths)] * (space.num_stages - 1))
        self.stages = nn.ModuleList(
            nn.ModuleList(
                ElasticConv(in_c if j == 0 else top, top, s if j == 0 else 1) for j in range(max(space.depths))
            )
            for in_c, s in zip(ins, space.strides)
        )
        self.fc = nn.Linear(top, space.num_classes)
        self.set_active(space.max_arch())

    def set_active(self, arch: ToyArch) -> ToyArch:
        return self._activate(self.space.validate(arch))

    def _activate(self, arch: ToyArch) -> ToyArch:
        for stage, width in zip(self.stages, arch.widths):
            for block in stage:
                block.out_c = width
        self.active_arch = arch
        return arch

    def sample_active(self, rng: Any = None, **restrictions: Sequence[int] | None) -> ToyArch:
        return self.set_active(sample_arch(self.space, rng, **restrictions))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for stage, depth in zip(self.stages, self.active_arch.depths):
            for block in stage[:depth]:
                x = block(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return F.linear(x, self.fc.weight[:, : x.shape[1]], self.fc.bias)

    @torch.no_grad()
    def extract(self, arch: ToyArch | None = None) -> ByobNet:
        return self.extract_checked(self.active_arch if arch is None else self.space.validate(arch))

    @torch.no_grad()
    def extract_checked(self, arch: ToyArch) -> ByobNet:
        """The ByobNet running ``arch``: its weights are prefixes of the supernet's."""
        previous = self.active_arch
        self._activate(arch)
        state = {f"stem.{k}": v.clone() for k, v in self.stem.state_dict().items()}
        prev = self.space.stem_width
        for s, (stage, depth) in enumerate(zip(self.stages, arch.depths)):
            for j in range(depth):
                state.update({f"stages.{s}.{j}.{k}": v for k, v in stage[j].active_state(prev).items()})
                prev = arch.widths[s]
        state["head.fc.weight"], state["head.fc.bias"] = self.fc.weight[:, :prev].clone(), self.fc.bias.clone()
        self._activate(previous)
        model = timm_model(timm_args(self.space, arch))
        model.load_state_dict(state)
        return model.train(self.training)

    def reorganize_for(self, trained: Mapping[str, Sequence[int]]) -> None:
        raise OFAError("the toy family does not reorganize channels (set reorganize_channels: false)")

    def save(self, path: str | Path, meta: dict[str, Any] | None = None) -> Path:
        record = {"format": SUPERNET_FORMAT, "space": self.space.to_dict(), "meta": meta or {}}
        return save_torch(path, {**record, "state_dict": self.state_dict()})

    @classmethod
    def load(cls, path: str | Path) -> ToySupernet:
        return cls.from_record(*read_record(path), str(path))

    @classmethod
    def from_record(cls, record: dict[str, Any], state: dict[str, Any], source: str) -> ToySupernet:
        net = cls(ToySpace.from_dict(record["space"], f"{source}:space"))
        net.load_state_dict(state)
        net.meta = dict(record.get("meta") or {})
        return net

    def copy(self) -> ToySupernet:
        net = ToySupernet(self.space)
        net.load_state_dict(self.state_dict())
        net.meta = dict(self.meta)
        net.set_active(self.active_arch)
        return net


# ------------------------------------------------------------------------------------------- the record
@dataclass(frozen=True)
class ToyImport:
    """``ofa import`` settings: none (the toy has no official checkpoints)."""


def derive_space(base: ToySpace, overrides: Mapping[str, Any] | None, where: str = "space") -> ToySpace:
    """A run from a toy supernet may change only its resolutions (no weight depends on them)."""
    merged = ToySpace.from_dict({**base.to_dict(), **(overrides or {})}, where)
    if replace(merged, resolutions=base.resolutions) != base:
        raise OFAError(f"{where}: only resolutions can change from the starting toy supernet")
    return merged


def adapt_supernet(net: ToySupernet, space: ToySpace, seed: int = 0) -> ToySupernet:
    new = ToySupernet(space)
    new.load_state_dict(net.state_dict())
    return new


def _no_import(path: Any, config: Any) -> Any:
    raise OFAError(f"{path}: the toy family has no official checkpoints")


TOY = Family(
    name=NAME,
    space_type=ToySpace,
    presets={"toy": ToySpace},
    arch_type=ToyArch,
    supernet_type=ToySupernet,
    layer_type=ToyLayer,
    layout=ToyLayout.of,
    encoder=ToyEncoder,
    sample_arch=sample_arch,
    build_subnet=build_subnet,
    timm_args=timm_args,
    timm_model=timm_model,
    layer_module=layer_module,
    official_arch=lambda space, config, source: ToyArch.from_ofa_config(config, source=source),
    official_matches=lambda state: False,
    official_import=_no_import,
    import_config=ToyImport,
    timm_folder=TOY_FOLDER,
    derive_space=derive_space,
    adapt_supernet=adapt_supernet,
)


# =========================================================================================== the tests
SPACE = ToySpace()
RECIPE = {
    "space": SPACE.to_dict(),
    "data": {
        "name": "synthetic",
        "image_size": 8,
        "batch_size": 16,
        "eval_batch_size": 64,
        "synthetic": {"train_size": 96, "test_size": 64, "num_classes": 4, "channels": 1, "noise": 0.3},
    },
    "seed": 0,
    "phases": [
        {"name": "full", "widths": [16], "depths": [2], "epochs": 1, "lr": 0.1},
        {"name": "elastic", "subnets_per_step": 2, "sandwich": True, "epochs": 1, "lr": 0.05},
    ],
    "eval": {"calib_batches": 2, "subnets": "minmax"},
    "pipeline": {"calib_batches": 2},
}


@pytest.fixture(scope="module")
def toy():
    """The toy family, registered for this module's tests only."""
    registry.register(TOY)
    yield TOY
    registry.unregister(NAME)
    assert NAME not in registry.family_names()


def test_space_and_arch_files_say_their_family(toy):
    d = SPACE.to_dict()
    space = registry.space_from_dict(d, "recipe:space")
    assert space == SPACE and space.to_dict() == d and d["family"] == NAME
    assert registry.family_of(space) is toy and space.fingerprint() == SPACE.fingerprint()
    with pytest.raises(SpaceError, match=r"^recipe:space\.kernels: unknown key"):
        registry.space_from_dict({**d, "kernels": [3]}, "recipe:space")
    with pytest.raises(SpaceError, match=r"^recipe:space\.widths: ByobNet rounds"):
        registry.space_from_dict({**d, "widths": [8, 12]}, "recipe:space")
    arch = ToyArch(8, (1, 2), (16, 8), space=SPACE.fingerprint())
    assert registry.arch_from_dict(space, arch.to_dict()) == arch
    with pytest.raises(SpaceError, match="an arch of family 'mbv3'"):
        registry.arch_from_dict(space, {"resolution": 8, "depths": [1, 2], "kernels": [3], "expands": [3]})
    with pytest.raises(SpaceError, match=r"arch\.widths\[1\]: 24 is not one of \[8, 16\]"):
        SPACE.validate(ToyArch(8, (1, 2), (16, 24)))


def test_layer_counts_are_those_of_the_built_subnets(toy):
    layout = ToyLayout.of(SPACE)
    archs = [a for r in SPACE.resolutions for a in layout.every_arch(r)]
    assert len(archs) == SPACE.count() * len(SPACE.resolutions)
    macs, params = macs_model(SPACE), params_model(SPACE)
    for arch in archs:
        model = build_subnet(SPACE, arch)
        assert SPACE.macs(arch) == count_macs(model, arch.resolution, SPACE.in_channels) == macs.predict(arch)
        assert SPACE.params(arch) == count_params(model) == params.predict(arch)
        assert layout.decode(layout.encode(arch)) == arch
    for r, row in zip(SPACE.resolutions, macs.cheapest_rows()):
        assert SPACE.macs(layout.decode(row)) == min(SPACE.macs(a) for a in layout.every_arch(r))
    rows = layout.encode_many(archs)
    features = ToyEncoder(SPACE).encode(archs)
    assert features.shape == (len(archs), layout.sizes.sum()) and (features.sum(1) == layout.genes).all()
    assert len({f.tobytes() for f in features}) == len(archs)  # distinct subnets, distinct features
    assert (layout.canonical(rows) == rows).all()


def test_supernet_subnets_are_the_extracted_timm_models(toy, tmp_path):
    net = perturb(ToySupernet(SPACE)).eval()
    x = torch.randn(3, SPACE.in_channels, 8, 8)
    for seed in range(6):
        arch = net.sample_active(seed)
        sub = net.extract(arch).eval()
        assert isinstance(sub, ByobNet) and sub.num_features == arch.widths[-1]
        xr = x[..., : arch.resolution, : arch.resolution]
        torch.testing.assert_close(sub(xr), net(xr), rtol=0, atol=1e-5)
    restricted = net.sample_active(0, widths=[8], depths=[1])
    assert restricted.widths == (8, 8) and restricted.depths == (1, 1)
    net.save(tmp_path / "toy.pt", meta={"note": "x"})
    back = registry.load_supernet(tmp_path / "toy.pt")
    assert isinstance(back, ToySupernet) and back.meta == {"note": "x"}
    back.eval().set_active(net.active_arch)
    torch.testing.assert_close(back(x), net(x), rtol=0, atol=0)


def test_train_table_predictor_search_export(toy, tmp_path, monkeypatch):
    """The pipeline's stages on a toy recipe, each stage's output checked."""
    recipe = tmp_path / "toy.yaml"
    recipe.write_text(yaml.safe_dump(RECIPE))
    table_path = tmp_path / "table.yaml"
    build_table(SPACE, TableBuildConfig(table_path, protocol=FAST, calibrate=2, max_noise_pct=100.0, progress=False))
    table = LatencyTable.load(table_path)
    assert set(table.entries) == {s.key for r in SPACE.resolutions for s in layer_specs(SPACE, r)}
    assert {ToyLayer.from_key(k).kind for k in table.entries} == {"stem", "conv", "head"}

    out = tmp_path / "run"
    known_call_ms(monkeypatch, 0.25)  # the exports' latency measurements read a known value
    # Two budgets from the cheapest subnet up to the largest. A toy subnet's layers cost about one call's
    # overhead, and on a busy host the table can price them all alike: the budgets stay 5% and 10% apart.
    bound = table.for_space(SPACE)
    lo = float(bound.predict_batch(cheapest_rows(SPACE, bound)).min())
    hi = max(table.predict(SPACE.max_arch(8)), 1.1 * lo)
    targets = (round_up(lo + 0.5 * (hi - lo)), round_up(hi))
    cfg = PipelineConfig(recipe=recipe, out=out, subnets=10, lut=table_path, targets_ms=targets)
    result = Pipeline(cfg, log=lambda _: None).run()
    first_export = {}  # each distinct subnet is exported once, under the first budget that picked it
    for row in result.rows:
        first_export.setdefault(row["arch"], f"export {Path(row['onnx']).stem}")
    assert result.ran == ["train", "collect", "fit", "search", *first_export.values()]

    net = registry.load_supernet(out / "supernet.pt")
    assert isinstance(net, ToySupernet) and net.space == SPACE
    lines = (out / "acc.jsonl").read_text().splitlines()
    assert sum('"arch"' in line for line in lines) == 10
    predictor = AccuracyPredictor.load(out / "predictor.pt")
    assert predictor.space == SPACE

    data = data_from_meta(net.meta)
    search = read_json(out / "search" / "search.json", "search")
    for target, row in zip(search["targets"], result.rows):
        arch = registry.load_arch(SPACE, out / "search" / f"arch_{target['target_ms']:g}ms.json")
        assert bound.predict(arch) <= target["target_ms"] + 1e-9
        assert row["predicted_ms"] == pytest.approx(bound.predict(arch)) and row["macs"] == SPACE.macs(arch)
        assert row["test_top1"] == onnx_top1(row["onnx"], data.test) and row["measured_ms"] == 0.25

    arch = registry.load_arch(SPACE, out / "search" / f"arch_{search['targets'][-1]['target_ms']:g}ms.json")
    folder = tmp_path / "folder"
    cfg = ExportConfig(out=folder, calib_batches=0, latency=False, checkpoint=out / "supernet.pt")
    export_subnet(net, arch, cfg, data=data)
    model = load_subnet(folder)
    config = read_json(folder / "config.json", "config")
    assert config[TOY_FOLDER.key] == timm_args(SPACE, arch) and config["architecture"] == TOY_FOLDER.architecture
    x = resize(torch.stack([data.test[i][0] for i in range(8)]), arch.resolution)
    net.eval().set_active(arch)
    torch.testing.assert_close(model(x), net(x), rtol=0, atol=1e-5)  # BN kept (calib_batches=0): the same net
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    logits = np.concatenate(
        [session.run(None, {session.get_inputs()[0].name: x[i : i + 1].numpy()})[0] for i in range(8)]
    )
    np.testing.assert_allclose(logits, net(x).detach().numpy(), rtol=0, atol=1e-4)
    assert config["num_features"] == arch.widths[-1] and config["ofa"]["arch"]["widths"] == list(arch.widths)
    snippet = TOY_FOLDER.snippet.format(config="config.json", weights="model.safetensors", key=TOY_FOLDER.key)
    assert snippet.strip() in (folder / "README.md").read_text()  # the card shows how timm alone rebuilds it
    monkeypatch.chdir(folder)
    scope: dict[str, Any] = {}
    exec(snippet, scope)
    torch.testing.assert_close(scope["model"](x), net(x), rtol=0, atol=1e-5)
