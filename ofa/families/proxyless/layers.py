"""One OFA-ProxylessNAS layer at its input shape (``LayerSpec``), its exact cost, and the module a latency table times.

Every layer runs ReLU6 and batch norm with eps 1e-3, as the official network; no squeeze-excite.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from timm.layers import BatchNormAct2d, SelectAdaptivePool2d, create_conv2d
from timm.models._efficientnet_blocks import DepthwiseSeparableConv, InvertedResidual
from torch import nn

from ofa.utils.errors import SpaceError

BN_EPS = 1e-3
KINDS = ("stem", "first", "mbconv", "head")


@dataclass(frozen=True)
class LayerSpec:
    """One layer config at its input shape: the unit of MACs, params and latency tables.

    kinds: ``stem`` (k×k conv+BN+ReLU6), ``first`` (fixed 3x3 depthwise-separable block, no skip),
    ``mbconv`` (elastic inverted residual; ``mid`` its expanded width), ``head`` (1x1 feature-mix
    conv+BN+ReLU6 to ``mid`` channels, global pool, classifier to ``out_c`` classes).
    """

    kind: str
    in_hw: int
    in_c: int
    out_c: int
    kernel: int = 1
    mid: int = 0
    stride: int = 1

    @property
    def out_hw(self) -> int:
        return 1 if self.kind == "head" else (self.in_hw - 1) // self.stride + 1

    @property
    def key(self) -> str:
        return (
            f"{self.kind}:in={self.in_hw}x{self.in_hw}x{self.in_c}:out={self.out_c}:k={self.kernel}"
            f":mid={self.mid}:s={self.stride}"
        )

    def card_cells(self) -> dict[str, str]:
        """The model card's columns for this layer between its widths and its MACs (header -> cell)."""
        return {"kernel": str(self.kernel), "mid channels": str(self.mid or ""), "stride": str(self.stride)}

    @classmethod
    def from_key(cls, key: str) -> LayerSpec:
        """Parse a `key`; raises ``SpaceError`` naming the key when it is not one."""
        kind, *parts = key.split(":")
        try:
            values = dict(p.split("=", 1) for p in parts)
            hw, _, c = values["in"].split("x")
            ints = (int(values[name]) for name in ("out", "k", "mid", "s"))
            spec = cls(kind, int(hw), int(c), *ints)
        except (KeyError, ValueError):
            raise SpaceError(f"layer key {key!r}: not an OFA-ProxylessNAS layer key") from None
        if kind not in KINDS or spec.key != key:
            raise SpaceError(f"layer key {key!r}: not an OFA-ProxylessNAS layer key")
        return spec

    @property
    def macs(self) -> int:
        """Multiply-accumulates of convolutions and linears (what FlopCounterMode counts, halved)."""
        o2, i2, k2, m = self.out_hw**2, self.in_hw**2, self.kernel**2, self.mid
        if self.kind == "stem":
            return o2 * self.in_c * self.out_c * k2
        if self.kind == "first":
            return o2 * self.in_c * k2 + o2 * self.in_c * self.out_c
        if self.kind == "mbconv":
            return i2 * self.in_c * m + o2 * m * k2 + o2 * m * self.out_c
        if self.kind == "head":
            return i2 * self.in_c * m + m * self.out_c
        raise SpaceError(f"unknown layer kind {self.kind!r}")

    @property
    def params(self) -> int:
        """Trainable parameters (conv weights, BN affine, classifier bias)."""
        k2, m = self.kernel**2, self.mid
        if self.kind == "stem":
            return self.in_c * self.out_c * k2 + 2 * self.out_c
        if self.kind == "first":
            return self.in_c * k2 + 2 * self.in_c + self.in_c * self.out_c + 2 * self.out_c
        if self.kind == "mbconv":
            return self.in_c * m + 2 * m + m * k2 + 2 * m + m * self.out_c + 2 * self.out_c
        if self.kind == "head":
            return self.in_c * m + 2 * m + m * self.out_c + self.out_c
        raise SpaceError(f"unknown layer kind {self.kind!r}")


def _norm_act(channels: int) -> nn.Module:
    return BatchNormAct2d(channels, eps=BN_EPS, act_layer=nn.ReLU6)


def layer_module(space: Any, spec: LayerSpec) -> nn.Module:
    """The standalone timm module (eval mode) that runs ``spec`` as the static subnet runs it, on inputs of
    shape ``(batch, spec.in_c, spec.in_hw, spec.in_hw)``; ``space`` (the family interface's) tells nothing more."""
    norm = partial(nn.BatchNorm2d, eps=BN_EPS)
    if spec.kind == "stem":
        conv = create_conv2d(spec.in_c, spec.out_c, spec.kernel, stride=spec.stride)
        module: nn.Module = nn.Sequential(conv, _norm_act(spec.out_c))
    elif spec.kind == "first":
        module = DepthwiseSeparableConv(
            spec.in_c, spec.out_c, dw_kernel_size=spec.kernel, noskip=True, act_layer=nn.ReLU6, norm_layer=norm
        )
    elif spec.kind == "mbconv":
        module = InvertedResidual(
            spec.in_c,
            spec.out_c,
            dw_kernel_size=spec.kernel,
            stride=spec.stride,
            exp_ratio=spec.mid / spec.in_c,
            act_layer=nn.ReLU6,
            norm_layer=norm,
        )
    elif spec.kind == "head":
        pool = SelectAdaptivePool2d(pool_type="avg", flatten=True)
        conv = create_conv2d(spec.in_c, spec.mid, 1)
        module = nn.Sequential(conv, _norm_act(spec.mid), pool, nn.Linear(spec.mid, spec.out_c))
    else:
        raise SpaceError(f"unknown layer kind {spec.kind!r}")
    return module.eval()
