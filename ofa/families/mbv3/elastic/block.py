"""The elastic inverted-residual block (MBConv): elastic kernel and expand ratio, fixed in/out."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ofa.families.mbv3.elastic.ops import (
    BatchNormTensors,
    ElasticBatchNorm2d,
    ElasticDepthwiseConv2d,
    ElasticPointwiseConv2d,
    ElasticSqueezeExcite,
    SqueezeExciteTensors,
)
from ofa.families.mbv3.layers import mid_channels, se_channels

_ACTS = {  # in place, as timm's BN+act
    "relu": F.relu_,
    "relu6": partial(F.relu6, inplace=True),
    "hswish": partial(F.hardswish, inplace=True),
}


class BlockTensors(NamedTuple):
    """The active subnet's weights and statistics of one block: slices (views, where they can be) of
    the block's tensors, and its depthwise kernel transformed to the active size."""

    conv_pw: torch.Tensor
    bn1: BatchNormTensors
    conv_dw: torch.Tensor
    bn2: BatchNormTensors
    se: SqueezeExciteTensors | None
    conv_pwl: torch.Tensor


class ElasticMBConv(nn.Module):
    """Pointwise expand → depthwise k×k → optional SE → pointwise project (+ skip).

    ``act`` is relu, relu6 (OFA-ProxylessNAS) or hswish; ``bn_eps`` is 1e-5 in OFA-MBv3, 1e-3 in
    OFA-ProxylessNAS.

    Sub-module names match timm's ``InvertedResidual`` so the active slice maps 1:1 onto the
    static block's state dict.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        stride: int,
        kernels: Sequence[int],
        expands: Sequence[int],
        se: bool,
        act: str,
        bn_eps: float = 1e-5,
    ) -> None:
        super().__init__()
        self.in_channels, self.out_channels, self.stride = in_channels, out_channels, stride
        self.expands = tuple(expands)
        self.max_mid = mid_channels(in_channels, max(expands))
        self.act = _ACTS[act]
        self.has_skip = stride == 1 and in_channels == out_channels
        self.conv_pw = ElasticPointwiseConv2d(in_channels, self.max_mid)
        self.bn1 = ElasticBatchNorm2d(self.max_mid, eps=bn_eps)
        self.conv_dw = ElasticDepthwiseConv2d(self.max_mid, tuple(kernels), stride)
        self.bn2 = ElasticBatchNorm2d(self.max_mid, eps=bn_eps)
        self.se = ElasticSqueezeExcite(self.max_mid) if se else None
        self.conv_pwl = ElasticPointwiseConv2d(self.max_mid, out_channels)
        self.bn3 = nn.BatchNorm2d(out_channels, eps=bn_eps)
        self.active_kernel = max(kernels)
        self.active_mid = self.max_mid

    def set_active(self, kernel: int, expand: int) -> None:
        self.active_kernel = kernel
        self.active_mid = mid_channels(self.in_channels, expand)

    def active_tensors(self, kernel_matrix: torch.Tensor | None = None) -> BlockTensors:
        """The active slice of every tensor the block runs with (``kernel_matrix``: this block's entry of
        `kernel_matrices`, when the caller built them for several blocks at once).

        A supernet builds these for all its active blocks before the first one runs. Small ops cost
        several times as much between convolutions, which leave the caches cold, as back to back; so
        the slices and kernel transforms run in a row, and so do their backward ops (turning active
        gradients into full-size ones), which autograd, taking nodes in reverse order of creation,
        leaves until after the last convolution's backward.
        """
        m = self.active_mid
        return BlockTensors(
            conv_pw=self.conv_pw.active_weight(m, self.in_channels),
            bn1=self.bn1.active_tensors(m),
            conv_dw=self.conv_dw.active_weight(m, self.active_kernel, kernel_matrix),
            bn2=self.bn2.active_tensors(m),
            se=None if self.se is None else self.se.active_tensors(m),
            conv_pwl=self.conv_pwl.active_weight(self.out_channels, m),
        )

    def forward(self, x: torch.Tensor, active: BlockTensors | None = None) -> torch.Tensor:
        """``active``: this block's `active_tensors`, when the caller already built them."""
        active = self.active_tensors() if active is None else active
        h = self.act(self.bn1(self.conv_pw(x, active.conv_pw), active.bn1))
        h = self.act(self.bn2(self.conv_dw(h, active.conv_dw), active.bn2))
        if self.se is not None:
            h = self.se(h, active.se)
        h = self.bn3(self.conv_pwl(h, active.conv_pwl))
        return h + x if self.has_skip else h

    @torch.no_grad()
    def active_state(self, kernel_matrix: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """State dict of the equivalent static timm block (kernel transforms applied, channels sliced)."""
        active = self.active_tensors(kernel_matrix)
        state = {f"{name}.weight": getattr(active, name) for name in ("conv_pw", "conv_dw", "conv_pwl")}
        for name in ("bn1", "bn2"):
            state.update({f"{name}.{key}": value for key, value in getattr(active, name)._asdict().items()})
            state[f"{name}.num_batches_tracked"] = getattr(self, name).num_batches_tracked
        state.update({f"bn3.{key}": value for key, value in self.bn3.state_dict().items()})
        if active.se is not None:
            state.update({f"se.{key}": value for key, value in active.se.conv_state().items()})
        return {k: v.detach().clone() for k, v in state.items()}

    @torch.no_grad()
    def reorganize_channels(self, frozen_expands: Sequence[int] = ()) -> None:
        """Sort expanded channels (and SE channels) by importance, largest first.

        Importance is the L1 norm of each channel's projection weights, as in OFA. Channel sets of
        ``frozen_expands`` (expand ratios trained by earlier phases) are kept: sorting only happens
        within the bands between their widths. A permutation of hidden channels leaves the block's
        function unchanged when the full width is active.
        """
        bands = sorted({mid_channels(self.in_channels, e) for e in frozen_expands} | {self.max_mid})
        order = _banded_argsort(self.conv_pwl.weight.abs().sum((0, 2, 3)), bands)
        self.conv_pw.weight.copy_(self.conv_pw.weight[order])
        self.conv_dw.weight.copy_(self.conv_dw.weight[order])
        self.conv_pwl.weight.copy_(self.conv_pwl.weight[:, order])
        for bn in (self.bn1, self.bn2):
            for t in (bn.weight, bn.bias, bn.running_mean, bn.running_var):
                t.copy_(t[order])
        if self.se is not None:
            se = self.se
            se.conv_expand.weight.copy_(se.conv_expand.weight[order])
            se.conv_expand.bias.copy_(se.conv_expand.bias[order])
            se.conv_reduce.weight.copy_(se.conv_reduce.weight[:, order])
            se_bands = sorted({se_channels(b) for b in bands})
            se_order = _banded_argsort(se.conv_expand.weight.abs().sum((0, 2, 3)), se_bands)
            se.conv_expand.weight.copy_(se.conv_expand.weight[:, se_order])
            se.conv_reduce.weight.copy_(se.conv_reduce.weight[se_order])
            se.conv_reduce.bias.copy_(se.conv_reduce.bias[se_order])


def _banded_argsort(importance: torch.Tensor, bands: Sequence[int]) -> torch.Tensor:
    """Descending argsort of ``importance`` within each band [b_i, b_{i+1}) of the prefix widths."""
    parts, start = [], 0
    for end in bands:
        if end > start:
            parts.append(start + torch.argsort(importance[start:end], descending=True, stable=True))
            start = end
    return torch.cat(parts)
