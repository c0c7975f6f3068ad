"""Reading an official elastic-MBConv checkpoint (OFA-MBv3 and OFA-ProxylessNAS): names and choices.

Both official networks store the same elastic blocks (``blocks.N.conv.{inverted_bottleneck,depth_conv,
point_linear}``, a 7→5→3 kernel-matrix chain) under the same naming versions, so keys canonicalize
and the largest kernel, expand ratio and depth read the same way; smaller choices come
from the paper's lists or the user's (`ImportConfig`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ofa.families.mbv3.layers import mid_channels
from ofa.utils.errors import OFAError
from ofa.utils.fields import field_label

_MATRIX = re.compile(r"^depth_conv\.conv\.(\d+)to(\d+)_matrix$")


def canonical_key(key: str) -> str:
    """One name per tensor whatever the official code's version wrote (its own loader's remapping).

    Older checkpoints say ``.mobile_inverted_conv.`` for ``.conv.``; dynamic layers nest
    ``.bn.bn.``, ``.conv.conv.weight`` and ``.linear.linear.`` where static ones do not.
    """
    key = key.replace(".mobile_inverted_conv.", ".conv.")
    for nested, flat in ((".bn.bn.", ".bn."), (".conv.conv.weight", ".conv.weight"), (".linear.linear.", ".linear.")):
        key = key.replace(nested, flat)
    return key


def canonical_state(state: Mapping[str, torch.Tensor], path: str | Path) -> dict[str, torch.Tensor]:
    """``state`` under canonical names (`canonical_key`), floats as fp32 (fp16 files too)."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        name = canonical_key(str(key))
        if name in out:
            raise OFAError(f"{path}: keys {key!r} and another name the same tensor {name!r}")
        out[name] = value.float() if value.is_floating_point() else value
    return out


def shape(state: Mapping[str, torch.Tensor], key: str, source: str, dims: int) -> tuple[int, ...]:
    """The shape of ``state[key]``, which must exist and have ``dims`` dimensions."""
    if key not in state:
        raise OFAError(f"{source}: missing key {key!r}")
    found = tuple(state[key].shape)
    if len(found) != dims:
        raise OFAError(f"{source}: {key} has shape {list(found)}, expected {dims} dimensions")
    return found


def kernel_set(state: Mapping[str, torch.Tensor], source: str) -> tuple[int, ...]:
    """Largest kernel from block 1's depthwise weight, smaller ones from its ``AtoB_matrix`` chain."""
    big = shape(state, "blocks.1.conv.depth_conv.conv.weight", source, 4)[-1]
    pairs = sorted(
        (int(m[1]), int(m[2]))
        for k in state
        if k.startswith("blocks.1.conv.") and (m := _MATRIX.match(k[len("blocks.1.conv.") :]))
    )
    kernels = sorted({big, *(b for _, b in pairs)}, reverse=True)
    if pairs != sorted(itertools.pairwise(kernels)):
        raise OFAError(
            f"{source}: kernel transform matrices {[f'{a}to{b}' for a, b in pairs]} do not form a "
            f"chain from the {big}x{big} kernel"
        )
    return tuple(sorted(kernels))


def max_expand(state: Mapping[str, torch.Tensor], source: str, blocks: int) -> int:
    """The integer ratio whose rounded width (``make_divisible(round(in * e))``) every block shows."""
    shapes = [shape(state, f"blocks.{n}.conv.inverted_bottleneck.conv.weight", source, 4) for n in range(1, blocks + 1)]
    for e in range(1, 17):
        if all(mid_channels(shape[1], e) == shape[0] for shape in shapes):
            return e
    out_c, in_c = shapes[0][:2]
    raise OFAError(f"{source}: expanded widths (e.g. {in_c}->{out_c} in blocks.1) match no integer expand ratio")


def paper_choices(found: int, given: tuple[int, ...] | None, paper: tuple[int, ...], name: str) -> tuple[int, ...]:
    """The paper's choices up to what the shapes show, or the user's, whose largest must be that."""
    if given is None:
        return tuple(sorted({v for v in paper if v < found} | {found}))
    if max(given) != found:
        raise OFAError(
            f"{field_label(ImportConfig, name)}: the largest choice must be {found} (the checkpoint's), "
            f"got {list(given)}"
        )
    return tuple(sorted(set(given)))


@dataclass(frozen=True)
class ImportConfig:
    """Settings of ``ofa import`` (its options): choice lists the shapes cannot tell, and optional transfer surgery."""

    expands: tuple[int, ...] | None = field(
        default=None,
        metadata={
            "metavar": "E,E,..",
            "help": "expand ratio choices (default: the paper's 3,4,6 up to the checkpoint's largest)",
        },
    )
    depths: tuple[int, ...] | None = field(
        default=None,
        metadata={
            "metavar": "D,D,..",
            "help": "depth choices (default: the paper's 2,3,4 up to the checkpoint's largest)",
        },
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
        for name in ("expands", "depths"):
            values = getattr(self, name)
            if values is not None and (not values or min(values) < 1):
                raise OFAError(f"{field_label(ImportConfig, name)}: expected positive integers, got {list(values)}")
        for name in ("num_classes", "in_channels"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise OFAError(f"{field_label(ImportConfig, name)}: must be positive, got {value}")
