"""One layer config at its input shape (``LayerSpec``) and its cost: the unit of MACs, params and latency tables.

Widths are rounded exactly as timm rounds them, so these counts equal those of the built subnet.
"""

from __future__ import annotations

from dataclasses import dataclass

from timm.layers import make_divisible

from ofa.utils.errors import SpaceError

SE_RATIO = 0.25


def mid_channels(in_channels: int, expand: float) -> int:
    """Expanded width of an inverted-residual block, rounded exactly as timm rounds it."""
    return make_divisible(in_channels * expand)


def se_channels(mid: int) -> int:
    """Squeeze-excite bottleneck width (timm's MobileNetV3 rule: a quarter of mid, divisible by 8)."""
    return make_divisible(mid * SE_RATIO)


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

    def card_cells(self) -> dict[str, str]:
        """The model card's columns for this layer between its widths and its MACs (header -> cell)."""
        return {
            "kernel": str(self.kernel),
            "mid channels": str(self.mid or ""),
            "stride": str(self.stride),
            "SE": "yes" if self.se else "",
            "activation": self.act,
        }

    @classmethod
    def from_key(cls, key: str) -> LayerSpec:
        kind, *parts = key.split(":")
        values = dict(p.split("=", 1) for p in parts)
        hw, _, c = values["in"].split("x")
        return cls(
            kind=kind,
            in_hw=int(hw),
            in_c=int(c),
            out_c=int(values["out"]),
            kernel=int(values["k"]),
            mid=int(values["mid"]),
            stride=int(values["s"]),
            se=values["se"] == "1",
            act=values["act"],
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
