"""Dynamic ops of the ResNet supernet: each holds the largest weights and runs their leading channels.

What the official ``DynamicConv2d``/``DynamicBatchNorm2d`` compute (prefix slices ``[:out, :in]``, taken by
`CornerGradient` so a small subnet's backward does not zero-fill full-size gradients; BN over the first
channels of its statistics). ``active_state`` hands the same slices to the extracted
timm subnet under timm's names (``conv.weight``, ``bn.*`` of a ``ConvNormAct``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ofa.families.corner_grad import CornerGradient


class ElasticBatchNorm2d(nn.BatchNorm2d):
    """Batch norm over the first C channels of its statistics and affine parameters."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = x.shape[1]
        if c == self.num_features:
            return super().forward(x)
        factor = self.momentum
        if self.training:
            self.num_batches_tracked.add_(1)
            if factor is None:  # cumulative average, as used by BN recalibration
                factor = 1.0 / float(self.num_batches_tracked)
        return F.batch_norm(
            x,
            self.running_mean[:c],
            self.running_var[:c],
            self.weight[:c],
            self.bias[:c],
            self.training,
            factor or 0.0,
            self.eps,
        )

    def active_state(self, channels: int) -> dict[str, torch.Tensor]:
        state = {n: getattr(self, n)[:channels].clone() for n in ("weight", "bias", "running_mean", "running_var")}
        return {**state, "num_batches_tracked": self.num_batches_tracked.clone()}


class ElasticConvBn(nn.Module):
    """k x k conv (no bias, 'same' padding) + BN (+ ReLU): timm's ``ConvNormAct`` with elastic channels."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int = 1, stride: int = 1, act: bool = True):
        super().__init__()
        self.stride, self.act = stride, act
        self.conv = nn.Conv2d(in_channels, out_channels, kernel, stride, kernel // 2, bias=False)
        nn.init.kaiming_normal_(self.conv.weight, mode="fan_out", nonlinearity="relu")
        self.corner = CornerGradient()
        self.bn = ElasticBatchNorm2d(out_channels)

    def forward(self, x: torch.Tensor, out_channels: int) -> torch.Tensor:
        weight = self.corner.slice(self.conv.weight, out_channels, x.shape[1])
        x = self.bn(F.conv2d(x, weight, None, self.stride, self.conv.padding))
        return F.relu(x, inplace=True) if self.act else x  # in place, as timm's ConvNormAct (BN keeps its input)

    def take_used_regions(self) -> dict[nn.Parameter, tuple[int, ...]]:
        """The leading region of each weight the step used (`CornerGradient.take_used`): the conv's corner, and the
        BN's first channels, which only that corner's outputs reach. Empty where none was used."""
        corner = self.corner.take_used()
        if corner is None:
            return {}
        return {self.conv.weight: corner, self.bn.weight: corner[:1], self.bn.bias: corner[:1]}

    def active_state(self, in_channels: int, out_channels: int) -> dict[str, torch.Tensor]:
        """State dict of timm's ``ConvNormAct`` of these widths, with this op's weights."""
        weight = self.conv.weight[:out_channels, :in_channels].clone()
        return {"conv.weight": weight, **{f"bn.{k}": v for k, v in self.bn.active_state(out_channels).items()}}


class ElasticLinear(nn.Linear):
    """The classifier over the first features of its input (as many as the active subnet's last stage has)."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__(in_features, out_features)
        self.corner = CornerGradient()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.corner.slice(self.weight, self.out_features, x.shape[1]), self.bias)

    def take_used_regions(self) -> dict[nn.Parameter, tuple[int, ...]]:
        """The weight's corner the step used (the bias is always whole). Empty where none was used."""
        corner = self.corner.take_used()
        return {} if corner is None else {self.weight: corner}
