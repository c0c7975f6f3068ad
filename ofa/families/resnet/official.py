"""Official once-for-all OFA-ResNet50 checkpoints -> our supernet, weight for weight.

The official ``OFAResNets`` computes what ours computes (prefix channel slices, BN eps 1e-5, the same
stem, pools and shortcuts); only names differ, so import is a key map plus a space read from the tensor
shapes. Shapes show the largest choices: the blocks per stage give the largest extra depth, the widths
the largest multiplier's channels, the bottleneck widths the largest expand ratio. The smaller choices
are the published ones (``ofa_resnet50``) unless the config names them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from ofa.families.resnet.layers import mid_channels
from ofa.families.resnet.space import ResNetSpace
from ofa.families.resnet.supernet import OFAResNet
from ofa.families.resnet.transfer import fold_input_channels, rehead
from ofa.families.supernet_file import finish_import, load_by_key_map, read_official_state
from ofa.utils.errors import OFAError
from ofa.utils.fields import field_label

PUBLISHED = ResNetSpace.ofa_resnet50()  # base depths, stage widths, strides and choice lists of the release
_BN = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")
_BLOCK_KEY = re.compile(r"^blocks\.(\d+)\.")
_LANDMARKS = ("input_stem.0.conv.weight", "input_stem.2.conv.weight", "classifier.linear.weight")
_PARTS = {"conv1": "conv1_1x1", "conv2": "conv2_kxk", "conv3": "conv3_1x1", "downsample": "shortcut.conv"}


def canonical_key(key: str) -> str:
    """One name per tensor whatever the official code wrote: dynamic layers nest ``.bn.bn.``,
    ``.conv.conv.weight`` and ``.linear.linear.`` where static ones do not."""
    for nested, flat in ((".bn.bn.", ".bn."), (".conv.conv.weight", ".conv.weight"), (".linear.linear.", ".linear.")):
        key = key.replace(nested, flat)
    return key


def matches(state_dict: Mapping[str, Any]) -> bool:
    """Whether a state dict (official names, any version) is an OFA-ResNet one, by its keys alone."""
    keys = {canonical_key(str(k)) for k in state_dict}
    return all(k in keys for k in _LANDMARKS) and "blocks.0.conv1.conv.weight" in keys


def _conv_bn(official: str, ours: str) -> dict[str, str]:
    return {f"{official}.conv.weight": f"{ours}.conv.weight", **{f"{official}.bn.{b}": f"{ours}.bn.{b}" for b in _BN}}


def official_key_map(space: ResNetSpace) -> dict[str, str]:
    """Official canonical key -> our supernet key, for every tensor of ``space``'s supernet."""
    out = {
        **_conv_bn("input_stem.0", "stem.conv1"),
        **_conv_bn("input_stem.1.conv", "stem.conv2"),
        **_conv_bn("input_stem.2", "stem.conv3"),
        "classifier.linear.weight": "head.fc.weight",
        "classifier.linear.bias": "head.fc.bias",
    }
    n = 0
    for s in range(space.num_stages):
        for j in range(space.stage_slots(s)):
            for part, ours in _PARTS.items():
                if part != "downsample" or j == 0:
                    out.update(_conv_bn(f"blocks.{n}.{part}", f"stages.{s}.{j}.{ours}"))
            n += 1
    return out


def read_official(path: str | Path) -> dict[str, torch.Tensor]:
    """The state dict of an official OFA-ResNet checkpoint, canonical names, floats as fp32."""
    state = read_official_state(path)
    if not matches(state):
        found = ", ".join(sorted(map(str, state))[:3])
        raise OFAError(f"{path}: not an OFA-ResNet checkpoint (no {_LANDMARKS[0]} or blocks.0.conv1; found {found})")
    out = {canonical_key(str(k)): v.float() if v.is_floating_point() else v for k, v in state.items()}
    if len(out) != len(state):
        raise OFAError(f"{path}: two keys name the same tensor")
    return out


def _shape(state: Mapping[str, torch.Tensor], key: str, source: str, dims: int) -> tuple[int, ...]:
    if key not in state:
        raise OFAError(f"{source}: missing key {key!r}")
    shape = tuple(state[key].shape)
    if len(shape) != dims:
        raise OFAError(f"{source}: {key} has shape {list(shape)}, expected {dims} dimensions")
    return shape


def _stage_blocks(state: Mapping[str, torch.Tensor], source: str) -> list[int]:
    """Blocks per stage: a stage starts at each block with a downsample (the official grouping)."""
    numbers = sorted({int(m[1]) for k in state if (m := _BLOCK_KEY.match(k))})
    if numbers != list(range(len(numbers))):
        raise OFAError(f"{source}: blocks are not numbered 0..N")
    starts = [n for n in numbers if f"blocks.{n}.downsample.conv.weight" in state]
    if not starts or starts[0] != 0:
        raise OFAError(f"{source}: blocks.0 has no downsample; not an OFA-ResNet checkpoint")
    return [b - a for a, b in zip(starts, [*starts[1:], len(numbers)])]


@dataclass(frozen=True)
class ImportConfig:
    """Choice lists of ``ofa import`` an OFA-ResNet checkpoint's shapes cannot tell (largest = the checkpoint's)."""

    widths: tuple[float, ...] | None = field(
        default=None, metadata={"metavar": "W,W,..", "help": "width multipliers (default: the published 0.65,0.8,1.0)"}
    )
    expands: tuple[float, ...] | None = field(
        default=None, metadata={"metavar": "E,E,..", "help": "expand ratios (default: the published 0.2,0.25,0.35)"}
    )
    depths: tuple[int, ...] | None = field(
        default=None, metadata={"metavar": "D,D,..", "help": "extra depths (default: 0,1,2 up to the checkpoint's)"}
    )
    num_classes: int | None = field(
        default=None, metadata={"metavar": "N", "help": "replace the classifier by a fresh N-way one"}
    )
    in_channels: int | None = field(
        default=None,
        metadata={"metavar": "C", "help": "input channels (1: the stem's RGB weights are summed, for grayscale data)"},
    )
    seed: int = field(default=0, metadata={"help": "seed of the fresh classifier"})

    def __post_init__(self) -> None:
        for name in ("widths", "expands", "depths"):
            values = getattr(self, name)
            if values is not None and not (values and (min(values) >= 0 if name == "depths" else min(values) > 0)):
                kind = "non-negative integers" if name == "depths" else "positive numbers"
                raise OFAError(f"{field_label(ImportConfig, name)}: expected {kind}, got {list(values)}")
        for name in ("num_classes", "in_channels"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise OFAError(f"{field_label(ImportConfig, name)}: must be positive, got {value}")


def _check_largest(space: ResNetSpace, state: Mapping[str, torch.Tensor], counts: list[int], source: str) -> None:
    """Raise unless the largest width multiplier and expand ratio of ``space`` give the checkpoint's widths."""
    firsts = [sum(counts[:s]) for s in range(space.num_stages)]
    found = [_shape(state, f"input_stem.{i}.conv.weight", source, 4)[0] for i in (0, 2)]
    found += [_shape(state, f"blocks.{n}.conv3.conv.weight", source, 4)[0] for n in firsts]
    stages = [max(space.stage_choices(s)) for s in range(space.num_stages)]
    expected = [max(space.stem_mid_choices()), max(space.stem_out_choices()), *stages]
    if found != expected:
        raise OFAError(
            f"{source}: widths {found} (stem middle, stem, stages) are not {expected} of the largest of widths "
            f"{list(space.widths)}; set {field_label(ImportConfig, 'widths')}"
        )
    for s, first in enumerate(firsts):
        for n in range(first, first + counts[s]):
            mid = _shape(state, f"blocks.{n}.conv1.conv.weight", source, 4)[0]
            if mid != mid_channels(stages[s], max(space.expands)):
                raise OFAError(
                    f"{source}: blocks.{n} has {mid} middle channels, not those of the largest of expands "
                    f"{list(space.expands)}; set {field_label(ImportConfig, 'expands')}"
                )


def infer_space(state: Mapping[str, torch.Tensor], source: str, config: ImportConfig = ImportConfig()) -> ResNetSpace:
    """The space an official checkpoint was built for: shapes, the published skeleton, the config's choices."""
    counts = _stage_blocks(state, source)
    extra = {c - b for c, b in zip(counts, PUBLISHED.base_depths)}
    if len(counts) != PUBLISHED.num_stages or len(extra) != 1 or min(extra) < 0:
        raise OFAError(f"{source}: blocks per stage {counts} are not base depths {list(PUBLISHED.base_depths)} + D")
    max_depth = extra.pop()
    depths = config.depths or (*(d for d in PUBLISHED.depths if d < max_depth), max_depth)
    if max(depths) != max_depth:
        raise OFAError(f"{field_label(ImportConfig, 'depths')}: the largest must be {max_depth} (the checkpoint's)")
    try:
        space = replace(
            PUBLISHED,
            widths=tuple(sorted(config.widths or PUBLISHED.widths)),
            expands=tuple(sorted(config.expands or PUBLISHED.expands)),
            depths=tuple(sorted(set(depths))),
            in_channels=_shape(state, "input_stem.0.conv.weight", source, 4)[1],
            num_classes=_shape(state, "classifier.linear.weight", source, 2)[0],
        )
    except OFAError as exc:
        raise OFAError(f"{source}: {exc}") from None
    _check_largest(space, state, counts, source)
    return space


def load_official_weights(net: OFAResNet, state: Mapping[str, torch.Tensor], source: str) -> OFAResNet:
    """Copy every official tensor into ``net``: each key known, none missing, every shape equal."""
    return load_by_key_map(net, state, official_key_map(net.space), source, "an OFA-ResNet")


def import_official(path: str | Path, config: ImportConfig = ImportConfig()) -> OFAResNet:
    """Our supernet computing what the official OFA-ResNet checkpoint at ``path`` computes (then the transfer surgery).

    ``net.meta`` carries the official preprocessing and where the weights came from; its BN statistics
    are the supernet's, so each subnet needs BN recalibration before it is deployed.
    """
    source = str(path)
    state = read_official(path)
    net = load_official_weights(OFAResNet(infer_space(state, source, config)), state, source)
    return finish_import(net, path, "OFAResNets", config, fold_input_channels, rehead)
