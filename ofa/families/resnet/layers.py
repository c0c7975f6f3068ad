"""One layer of an OFA-ResNet subnet at its input shape (``LayerSpec``): the unit of MACs, params and latency tables.

kinds: ``stem`` (3x3 conv+BN+ReLU), ``stem_res`` (the stem's residual 3x3 conv block, ``x + ReLU(BN(conv x))``),
``pool`` (the 3x3/2 max-pool), ``bottleneck`` (1x1, 3x3 with the stride, 1x1, plus the shortcut: identity or
avg-pool + 1x1 conv + BN when ``shortcut``), ``head`` (global average pool and classifier).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from timm.layers import ClassifierHead, make_divisible
from timm.models.byobnet import BottleneckBlock, ByoModelCfg, get_layer_fns
from torch import nn

from ofa.utils.errors import SpaceError

KINDS = ("stem", "stem_res", "pool", "bottleneck", "head")


def mid_channels(out_channels: int, expand: float) -> int:
    """A bottleneck's middle width, rounded as the official code rounds it: ``make_divisible(round(out * e))``."""
    return make_divisible(round(out_channels * expand))


def out_size(hw: int, stride: int) -> int:
    """Spatial size after a padded 3x3 conv, the 3x3/2 max-pool or a ceil-mode avg-pool of that stride."""
    return (hw - 1) // stride + 1


@dataclass(frozen=True)
class LayerSpec:
    """One layer config at its input shape; ``mid`` is a bottleneck's middle width, ``shortcut`` its conv shortcut."""

    kind: str
    in_hw: int
    in_c: int
    out_c: int
    mid: int = 0
    stride: int = 1
    shortcut: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise SpaceError(f"unknown layer kind {self.kind!r} (allowed: {', '.join(KINDS)})")

    @property
    def out_hw(self) -> int:
        return 1 if self.kind == "head" else out_size(self.in_hw, self.stride)

    @property
    def key(self) -> str:
        return (
            f"{self.kind}:in={self.in_hw}x{self.in_hw}x{self.in_c}:out={self.out_c}:mid={self.mid}"
            f":s={self.stride}:sc={int(self.shortcut)}"
        )

    def card_cells(self) -> dict[str, str]:
        """The model card's columns for this layer between its widths and its MACs (header -> cell)."""
        shortcut = "conv" if self.shortcut else ("identity" if self.kind in ("bottleneck", "stem_res") else "")
        return {"mid channels": str(self.mid or ""), "stride": str(self.stride), "shortcut": shortcut}

    @classmethod
    def from_key(cls, key: str) -> LayerSpec:
        kind, *parts = key.split(":")
        values = dict(p.split("=", 1) for p in parts)
        hw, _, c = values["in"].split("x")
        return cls(kind, int(hw), int(c), int(values["out"]), int(values["mid"]), int(values["s"]), values["sc"] == "1")

    @property
    def macs(self) -> int:
        """Multiply-accumulates of convolutions and linears (what FlopCounterMode counts, halved)."""
        o2, i2, m = self.out_hw**2, self.in_hw**2, self.mid
        if self.kind in ("stem", "stem_res"):
            return o2 * self.in_c * self.out_c * 9
        if self.kind == "bottleneck":
            shortcut = o2 * self.in_c * self.out_c if self.shortcut else 0
            return i2 * self.in_c * m + o2 * m * m * 9 + o2 * m * self.out_c + shortcut
        if self.kind == "head":
            return self.in_c * self.out_c
        return 0  # pool

    @property
    def params(self) -> int:
        """Trainable parameters (conv weights, BN affine, classifier weight and bias)."""
        m = self.mid
        if self.kind in ("stem", "stem_res"):
            return self.in_c * self.out_c * 9 + 2 * self.out_c
        if self.kind == "bottleneck":
            shortcut = self.in_c * self.out_c + 2 * self.out_c if self.shortcut else 0
            return self.in_c * m + 2 * m + 9 * m * m + 2 * m + m * self.out_c + 2 * self.out_c + shortcut
        if self.kind == "head":
            return self.in_c * self.out_c + self.out_c
        return 0  # pool


# The one line that makes timm's stem conv2 the official residual stem block (a model card prints it).
STEM_PATCH = "model.stem.conv2.register_forward_hook(lambda module, args, out: args[0] + out)"


def add_block_input(module: nn.Module, args: tuple[torch.Tensor, ...], out: torch.Tensor) -> torch.Tensor:
    """Forward hook turning a conv block into ``x + block(x)`` (`STEM_PATCH`, as a picklable function)."""
    return args[0] + out


def layer_module(space: Any, spec: LayerSpec) -> nn.Module:
    """The standalone timm module (eval mode) a latency table times for ``spec``, on inputs of shape
    ``(batch, spec.in_c, spec.in_hw, spec.in_hw)``; ``space`` (the family interface's) tells nothing more here."""
    layers = get_layer_fns(ByoModelCfg(blocks=(), act_layer="relu"))
    if spec.kind in ("stem", "stem_res"):
        module: nn.Module = layers.conv_norm_act(spec.in_c, spec.out_c, 3, stride=spec.stride)
        if spec.kind == "stem_res":
            module.register_forward_hook(add_block_input)
    elif spec.kind == "pool":
        module = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
    elif spec.kind == "bottleneck":
        ratio = spec.mid / spec.out_c
        module = BottleneckBlock(spec.in_c, spec.out_c, stride=spec.stride, bottle_ratio=ratio, layers=layers)
    else:
        module = ClassifierHead(spec.in_c, spec.out_c)
    return module.eval()
