"""A depthwise convolution whose weight gradient on the CPU is itself a depthwise convolution.

oneDNN computes a depthwise conv's weight gradient for kernels above 3×3 on a slow path, many times a 3×3's
at the digits supernet's sizes and at ImageNet sizes alike (`bench.depthwise_grad` times both). That
gradient is a correlation of each (image, channel) input plane with its output gradient, which is the
forward depthwise convolution of ``x`` reshaped to ``(1, N·C, H, W)`` by the output gradient as ``N·C``
kernels (dilated by the stride), summed over the images; oneDNN's forward is fast at every size. So is the
input gradient at stride 1: the forward convolution of the output gradient by the flipped kernel (aten's own
backward at stride 2, where it is not slower).

`depthwise_conv2d` takes this path on the CPU for kernels of 5 and up, where it is several times faster
(`bench.depthwise_grad`), and is `F.conv2d` elsewhere: 3×3 kernels, where the two cost about the same, other
devices, whose libraries have no such slow path, and CPU autocast, whose dtypes the backward would not see.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

FAST_FROM_KERNEL = 5  # oneDNN's own weight gradient is as fast as this one below this kernel size


def depthwise_conv2d(x: torch.Tensor, weight: torch.Tensor, stride: int, padding: int) -> torch.Tensor:
    """``F.conv2d(x, weight, None, stride, padding, 1, groups=channels)``, with the weight gradient computed
    as a forward depthwise convolution on the CPU for kernels of `FAST_FROM_KERNEL` and up (see module doc)."""
    channels, kernel = weight.shape[0], weight.shape[-1]
    plain = x.device.type != "cpu" or kernel < FAST_FROM_KERNEL or torch.is_autocast_enabled("cpu")
    if plain or not torch.is_grad_enabled():
        return F.conv2d(x, weight, None, stride, padding, 1, channels)
    return DepthwiseConv.apply(x, weight, stride, padding)


def depthwise_weight_grad(
    x: torch.Tensor, grad_out: torch.Tensor, kernel: int, stride: int, padding: int
) -> torch.Tensor:
    """The gradient of a depthwise conv's ``(C, 1, kernel, kernel)`` weight: each input plane correlated with
    its output gradient (dilated by ``stride``), one group per (image, channel), summed over the images."""
    n, c, h, w = x.shape
    planes = F.conv2d(
        x.reshape(1, n * c, h, w), grad_out.reshape(n * c, 1, *grad_out.shape[2:]), None, 1, padding, stride, n * c
    )
    return planes[..., :kernel, :kernel].reshape(n, c, kernel, kernel).sum(0).unsqueeze(1)


class DepthwiseConv(torch.autograd.Function):
    """Forward: oneDNN's depthwise conv. Backward: both gradients as forward depthwise convs (see module doc)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, stride: int, padding: int) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.stride, ctx.padding = stride, padding
        return F.conv2d(x, weight, None, stride, padding, 1, weight.shape[0])

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None, None]:
        x, weight = ctx.saved_tensors
        s, p = ctx.stride, ctx.padding
        grad_x = grad_w = None
        if ctx.needs_input_grad[0] and s == 1:  # a stride-1 correlation's transpose: the flipped kernel's
            k = weight.shape[-1]
            grad_x = F.conv2d(grad_out, weight.flip(-2, -1), None, 1, k - 1 - p, 1, weight.shape[0])
        elif ctx.needs_input_grad[0]:
            grad_x = torch.ops.aten.convolution_backward(
                grad_out, x, weight, None, [s, s], [p, p], [1, 1], False, [0, 0], weight.shape[0], [True, False, False]
            )[0]
        if ctx.needs_input_grad[1]:
            grad_w = depthwise_weight_grad(x, grad_out.contiguous(), weight.shape[-1], s, p)
        return grad_x, grad_w, None, None
