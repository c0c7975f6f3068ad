"""Dynamic ops: each holds the largest weights and runs a prefix slice (or kernel transform) of them.

Only the active slice takes part in forward and backward; a static layer with the sliced weights
computes the same function, which is what `active_state` hands to the extracted subnet.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ofa.layers import se_channels


class ElasticPointwiseConv2d(nn.Module):
    """1x1 convolution without bias whose input and output channels are prefix slices."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, 1, 1))
        nn.init.kaiming_normal_(self.weight, mode="fan_out")

    def active_weight(self, out_channels: int, in_channels: int) -> torch.Tensor:
        return self.weight[:out_channels, :in_channels]

    def forward(self, x: torch.Tensor, out_channels: int) -> torch.Tensor:
        return F.conv2d(x, self.active_weight(out_channels, x.shape[1]))


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

    def kernel_matrix(self, kernel: int) -> torch.Tensor:
        """The (k², K²) matrix taking a flattened largest kernel to its transformed k×k kernel.

        Crop-then-transform at each size is linear, so the chain folds into one small matrix built
        from the transforms alone; all channels then take a single matmul, and backward needs no
        crops, copies or zero-filled gradients of intermediate kernels. Crops are views of the small
        matrices (a centre window of rows, then zero columns padded around the first crop), not
        gathers or products with 0/1 matrices: each tiny matmul or scatter costs a threaded kernel
        launch in backward, which is what the elastic step paid for beside its static twin.
        """
        big, first = self.kernels[0], self.kernels[1]
        matrix: torch.Tensor | None = None  # (small², first²): acts on the largest kernel's first² centre
        size = big
        for small in self.kernels[1:]:
            if kernel > small:
                break
            transform = self.transforms[f"{size}to{small}"]
            if matrix is None:
                matrix = transform
            else:
                start = (size - small) // 2
                window = matrix.view(size, size, -1)[start : start + small, start : start + small]
                matrix = torch.mm(transform, window.reshape(small * small, -1))
            size = small
        assert matrix is not None, f"kernel {kernel} is not one of {self.kernels[1:]}"
        margin = (big - first) // 2
        return F.pad(matrix.view(-1, first, first), (margin,) * 4).view(kernel * kernel, big * big)

    def active_weight(self, channels: int, kernel: int) -> torch.Tensor:
        weight = self.weight[:channels]  # a view: the prefix of a contiguous tensor is contiguous
        if kernel == self.kernels[0]:
            return weight
        flat = torch.mm(weight.view(channels, -1), self.kernel_matrix(kernel).t())
        return flat.view(channels, 1, kernel, kernel)

    def forward(self, x: torch.Tensor, kernel: int) -> torch.Tensor:
        channels = x.shape[1]
        return F.conv2d(x, self.active_weight(channels, kernel), None, self.stride, kernel // 2, 1, channels)


class ElasticBatchNorm2d(nn.BatchNorm2d):
    """Batch norm over the first C channels of its statistics and affine parameters."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = x.shape[1]  # slicing all C channels returns the tensor itself, so the full width costs nothing
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


class ElasticSqueezeExcite(nn.Module):
    """MobileNetV3 squeeze-excite whose width follows the active expanded channels."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        reduced = se_channels(channels)
        self.conv_reduce = nn.Conv2d(channels, reduced, 1, bias=True)
        self.conv_expand = nn.Conv2d(reduced, channels, 1, bias=True)

    def active_params(self, channels: int) -> dict[str, torch.Tensor]:
        r = se_channels(channels)
        return {
            "conv_reduce.weight": self.conv_reduce.weight[:r, :channels],
            "conv_reduce.bias": self.conv_reduce.bias[:r],
            "conv_expand.weight": self.conv_expand.weight[:channels, :r],
            "conv_expand.bias": self.conv_expand.bias[:channels],
        }

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The 1x1 convolutions of timm's SE run as matmuls on the pooled vector: the same sums,
        without a convolution's setup or the contiguous copies a conv makes of 2-D weight slices."""
        n, c = x.shape[:2]
        r = se_channels(c)
        reduce, expand = self.conv_reduce, self.conv_expand
        s = x.mean((2, 3))
        s = F.relu_(F.linear(s, reduce.weight.view(reduce.weight.shape[:2])[:r, :c], reduce.bias[:r]))
        s = F.linear(s, expand.weight.view(expand.weight.shape[:2])[:c, :r], expand.bias[:c])
        return x * F.hardsigmoid(s).view(n, c, 1, 1)
