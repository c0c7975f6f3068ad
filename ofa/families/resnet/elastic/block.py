"""The elastic bottleneck block: 1x1 -> 3x3 (stride) -> 1x1, plus identity or avg-pool + 1x1 conv shortcut.

Module names mirror timm's ``BottleneckBlock`` (``conv1_1x1``, ``conv2_kxk``, ``conv3_1x1``,
``shortcut.conv``), so the extracted subnet is a state-dict copy.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ofa.families.resnet.elastic.ops import ElasticConvBn


class ElasticShortcut(nn.Module):
    """The official ``avgpool_conv`` downsample: AvgPool(stride, ceil_mode), 1x1 conv, BN (timm's DownsampleAvg)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.conv = ElasticConvBn(in_channels, out_channels, act=False)

    def forward(self, x: torch.Tensor, out_channels: int) -> torch.Tensor:
        if self.stride > 1:
            x = F.avg_pool2d(x, self.stride, self.stride, ceil_mode=True, count_include_pad=False)
        return self.conv(x, out_channels)


class ElasticBottleneck(nn.Module):
    """A bottleneck block at its largest widths; ``forward`` runs the given middle and output widths."""

    def __init__(self, in_channels: int, out_channels: int, mid_channels: int, stride: int, shortcut: bool) -> None:
        super().__init__()
        self.conv1_1x1 = ElasticConvBn(in_channels, mid_channels)
        self.conv2_kxk = ElasticConvBn(mid_channels, mid_channels, 3, stride)
        self.conv3_1x1 = ElasticConvBn(mid_channels, out_channels, act=False)
        self.shortcut = ElasticShortcut(in_channels, out_channels, stride) if shortcut else None

    def forward(self, x: torch.Tensor, mid: int, out: int) -> torch.Tensor:
        residual = x if self.shortcut is None else self.shortcut(x, out)
        y = self.conv3_1x1(self.conv2_kxk(self.conv1_1x1(x, mid), mid), out)
        return F.relu(y + residual, inplace=True)

    def active_state(self, in_c: int, mid: int, out: int) -> dict[str, torch.Tensor]:
        """State dict of timm's ``BottleneckBlock(in_c, out)`` with middle width ``mid``, with these weights."""
        parts = (
            ("conv1_1x1", self.conv1_1x1, in_c, mid),
            ("conv2_kxk", self.conv2_kxk, mid, mid),
            ("conv3_1x1", self.conv3_1x1, mid, out),
        )
        if self.shortcut is not None:
            parts += (("shortcut.conv", self.shortcut.conv, in_c, out),)
        return {f"{name}.{k}": v for name, op, i, o in parts for k, v in op.active_state(i, o).items()}

    @torch.no_grad()
    def reorganize_channels(self, bands: Sequence[int]) -> None:
        """Sort the middle channels by importance, largest first, within each band ``[b_i, b_i+1)`` of the
        prefix widths ``bands`` (the official ``re_organize_middle_weights``: conv3's L1 norms order conv2's
        outputs, then conv2's order conv1's). The block's function is unchanged at full width."""
        for producer, consumer in ((self.conv2_kxk, self.conv3_1x1), (self.conv1_1x1, self.conv2_kxk)):
            order = _banded_argsort(consumer.conv.weight.abs().sum((0, 2, 3)), bands)
            consumer.conv.weight.copy_(consumer.conv.weight[:, order])
            producer.conv.weight.copy_(producer.conv.weight[order])
            bn = producer.bn
            for t in (bn.weight, bn.bias, bn.running_mean, bn.running_var):
                t.copy_(t[order])


def _banded_argsort(importance: torch.Tensor, bands: Sequence[int]) -> torch.Tensor:
    """Descending argsort of ``importance`` within each band of the increasing prefix widths ``bands``."""
    parts, start = [], 0
    for end in sorted(set(bands)):
        if end > start:
            parts.append(start + torch.argsort(importance[start:end], descending=True, stable=True))
            start = end
    return torch.cat(parts)
