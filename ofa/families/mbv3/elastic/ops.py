"""Dynamic ops: each holds the largest weights and runs a prefix slice (or kernel transform) of them.

Only the active slice takes part in forward and backward; a static layer with the sliced weights
computes the same function, which is what `active_state` hands to the extracted subnet. Each op's
``active_*`` method takes the slice and its forward runs with it, so that a supernet can take every
block's slices before the first block runs (see `ElasticMBConv.active_tensors`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ofa.families.depthwise_grad import depthwise_conv2d
from ofa.families.mbv3.layers import se_channels


class ElasticPointwiseConv2d(nn.Module):
    """1x1 convolution without bias whose input and output channels are prefix slices."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, 1, 1))
        nn.init.kaiming_normal_(self.weight, mode="fan_out")

    def active_weight(self, out_channels: int, in_channels: int) -> torch.Tensor:
        """The top-left slice, contiguous as the convolution wants it: a view when all input channels
        are active, else a copy (which the convolution would make anyway, in the middle of a step)."""
        return _prefix(_prefix(self.weight, out_channels), in_channels, dim=1).contiguous()

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """``weight``: this conv's `active_weight` for ``x``'s channels."""
        return F.conv2d(x, weight)


class ElasticDepthwiseConv2d(nn.Module):
    """Depthwise conv with elastic kernel size and channels (OFA's kernel transformation).

    A smaller kernel is the centre of the next larger one passed through a learned k²×k² matrix
    (initialised to identity), applied progressively 7→5→3 so small kernels share the big weights
    without being forced to equal their centre.
    """

    def __init__(self, channels: int, kernels: tuple[int, ...], stride: int) -> None:
        super().__init__()
        self.kernels = tuple(sorted(kernels, reverse=True))
        self.stride = stride
        big = self.kernels[0]
        self.weight = nn.Parameter(torch.empty(channels, 1, big, big))
        nn.init.kaiming_normal_(self.weight, mode="fan_out")
        self.transforms = nn.ParameterDict(
            {
                f"{big}to{small}": nn.Parameter(torch.eye(small * small))
                for big, small in zip(self.kernels, self.kernels[1:])
            }
        )

    def active_weight(self, channels: int, kernel: int, matrix: torch.Tensor | None = None) -> torch.Tensor:
        """The first ``channels`` kernels at size ``kernel``; ``matrix`` is this conv's entry of
        `kernel_matrices` when the caller already built it for several convs at once."""
        if kernel == self.kernels[0]:
            return _prefix(self.weight, channels)  # the prefix of a contiguous tensor is contiguous
        if matrix is None:
            matrix = kernel_matrices([self], [kernel])[0]
        return torch.mm(_flat_prefix(self.weight, channels), matrix).view(channels, 1, kernel, kernel)

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """``weight``: this conv's `active_weight` for ``x``'s channels."""
        return depthwise_conv2d(x, weight, self.stride, weight.shape[-1] // 2)


def kernel_matrices(convs: Sequence[ElasticDepthwiseConv2d], kernels: Sequence[int]) -> list[torch.Tensor | None]:
    """Each conv's (K², k²) matrix taking its flattened largest kernel (a row) to its transformed k×k
    kernel (None where k is the largest size).

    Crop-then-transform at each size is linear, so a conv's chain folds into one small matrix built
    from its transforms alone; all its channels then take a single matmul, and backward needs no
    crops or zero-filled gradients of intermediate kernels. Convs that share their kernel sizes and
    active kernel run the chain as one batched computation on their stacked transforms: a step then
    pays for a handful of tiny ops and autograd nodes in all, not a handful per block, beside a static
    model whose kernels are plain weights.
    """
    groups: dict[tuple[tuple[int, ...], int], list[int]] = {}
    for i, (conv, kernel) in enumerate(zip(convs, kernels, strict=True)):
        assert kernel in conv.kernels, f"kernel {kernel} is not one of {conv.kernels}"
        if kernel != conv.kernels[0]:
            groups.setdefault((conv.kernels, kernel), []).append(i)
    matrices: list[torch.Tensor | None] = [None] * len(convs)
    for (sizes, kernel), members in groups.items():
        stacked = _stacked_kernel_matrices([convs[i] for i in members], sizes, kernel)
        for i, matrix in zip(members, stacked.transpose(1, 2).unbind()):
            matrices[i] = matrix
    return matrices


def _stacked_kernel_matrices(
    convs: Sequence[ElasticDepthwiseConv2d], sizes: tuple[int, ...], kernel: int
) -> torch.Tensor:
    """(n, k², K²) matrices of n convs with kernel sizes ``sizes`` (descending), applied 7→5→3.

    The first transform acts on the largest kernel's centre; each later one on a centre window of
    the rows built so far (a view, not a gather); the result is padded with zero columns back to
    the largest kernel's size.
    """
    n, big, first = len(convs), sizes[0], sizes[1]
    matrix: torch.Tensor | None = None  # (n, small², first²)
    size = big
    for small in sizes[1:]:
        if kernel > small:
            break
        transforms = torch.stack([conv.transforms[f"{size}to{small}"] for conv in convs])
        if matrix is None:
            matrix = transforms
        else:
            start = (size - small) // 2
            window = matrix.view(n, size, size, -1)[:, start : start + small, start : start + small]
            matrix = torch.bmm(transforms, window.reshape(n, small * small, -1))
        size = small
    assert matrix is not None
    margin = (big - first) // 2
    return F.pad(matrix.view(n, -1, first, first), (margin,) * 4).view(n, kernel * kernel, big * big)


class BatchNormTensors(NamedTuple):
    """The first C channels of a batch norm's statistics and affine parameters (views; field names are
    its state dict's)."""

    running_mean: torch.Tensor
    running_var: torch.Tensor
    weight: torch.Tensor
    bias: torch.Tensor


class ElasticBatchNorm2d(nn.BatchNorm2d):
    """Batch norm over the first C channels of its statistics and affine parameters."""

    def active_tensors(self, channels: int) -> BatchNormTensors:
        tensors = (self.running_mean, self.running_var, self.weight, self.bias)
        return BatchNormTensors(*(_prefix(t, channels) for t in tensors))

    def forward(self, x: torch.Tensor, active: BatchNormTensors | None = None) -> torch.Tensor:
        """``active``: `active_tensors` for ``x``'s channels, when the caller already sliced them."""
        active = self.active_tensors(x.shape[1]) if active is None else active
        factor = self.momentum
        if self.training:
            self.num_batches_tracked.add_(1)
            if factor is None:  # cumulative average, as used by BN recalibration
                factor = 1.0 / float(self.num_batches_tracked)
        return F.batch_norm(x, *active, self.training, factor or 0.0, self.eps)


class SqueezeExciteTensors(NamedTuple):
    """A squeeze-excite's active weights as the matmuls of `ElasticSqueezeExcite.forward` take them."""

    reduce_bias: torch.Tensor
    reduce_matrix: torch.Tensor  # conv_reduce.weight[:r, :c] as a transposed (c, r) matrix
    expand_bias: torch.Tensor
    expand_matrix: torch.Tensor  # conv_expand.weight[:c, :r] as a transposed (r, c) matrix

    def conv_state(self) -> dict[str, torch.Tensor]:
        """The same tensors as the state dict of timm's SqueezeExcite (1x1 conv weights and biases)."""
        return {
            "conv_reduce.weight": self.reduce_matrix.t()[..., None, None],
            "conv_reduce.bias": self.reduce_bias,
            "conv_expand.weight": self.expand_matrix.t()[..., None, None],
            "conv_expand.bias": self.expand_bias,
        }


class ElasticSqueezeExcite(nn.Module):
    """MobileNetV3 squeeze-excite whose width follows the active expanded channels."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        reduced = se_channels(channels)
        self.conv_reduce = nn.Conv2d(channels, reduced, 1, bias=True)
        self.conv_expand = nn.Conv2d(reduced, channels, 1, bias=True)

    def active_tensors(self, channels: int) -> SqueezeExciteTensors:
        r = se_channels(channels)
        reduce, expand = self.conv_reduce, self.conv_expand
        return SqueezeExciteTensors(
            _prefix(reduce.bias, r),
            _top_left_t(reduce.weight, r, channels),
            _prefix(expand.bias, channels),
            _top_left_t(expand.weight, channels, r),
        )

    def forward(self, x: torch.Tensor, active: SqueezeExciteTensors | None = None) -> torch.Tensor:
        """The 1x1 convolutions of timm's SE run as matmuls on the pooled vector: the same sums,
        without a convolution's setup or the contiguous copies a conv makes of 2-D weight slices.
        ``active``: `active_tensors` for ``x``'s channels, when the caller already sliced them."""
        n, c = x.shape[:2]
        active = self.active_tensors(c) if active is None else active
        s = F.relu_(torch.addmm(active.reduce_bias, x.mean((2, 3)), active.reduce_matrix))
        s = torch.addmm(active.expand_bias, s, active.expand_matrix)
        return x * F.hardsigmoid(s).view(n, c, 1, 1)


def _prefix(tensor: torch.Tensor, size: int, dim: int = 0) -> torch.Tensor:
    """The first ``size`` entries of ``tensor`` along ``dim``, and at full size the tensor itself: a
    full-range slice of a parameter is still an autograd node, whose backward copies the whole gradient
    into a zero-filled tensor of the same size."""
    return tensor if size == tensor.shape[dim] else tensor.narrow(dim, 0, size)


def _flat_prefix(weight: torch.Tensor, rows: int) -> torch.Tensor:
    """``weight[:rows]`` flattened to a (rows, rest) matrix in one strided view: one autograd node,
    where a slice and a view make two. At full size it is a plain view, whose gradient is no copy."""
    if rows == weight.shape[0]:
        return weight.view(rows, -1)
    assert weight.is_contiguous(), "elastic weights are contiguous"
    return weight.as_strided((rows, weight.numel() // weight.shape[0]), (weight.stride(0), 1), weight.storage_offset())


def _top_left_t(weight: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """``weight[:rows, :cols]`` of a conv weight as a transposed 2-D matrix (what ``F.linear`` would
    multiply by), in one strided view: one autograd node and one zero-filled full-size gradient,
    where a view, a slice per dimension and a transpose make four nodes and two full-size gradients.
    At full size it is a plain view, whose gradient is no copy."""
    if (rows, cols) == weight.shape[:2]:
        return weight.view(rows, cols).t()
    return weight.as_strided((cols, rows), weight.stride()[1::-1], weight.storage_offset())
