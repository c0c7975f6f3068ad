"""A weight's leading slice ``weight[:out, :in]`` whose backward does not zero-fill a full-size gradient.

A slice's own backward allocates a zero gradient the size of the whole weight every step and copies the
slice's gradient into its corner; for a small subnet of a wide supernet that memset is a large part of
what a step costs beyond its static twin (`bench.elastic_overhead`). `CornerGradient` keeps one such
buffer per weight across steps and clears only what its last step wrote outside this step's corner, so
``weight.grad`` holds the same values, bit for bit, as after the plain slice.

The buffer becomes ``weight.grad`` at the first backward of a step (when ``.grad`` is None: the optimizer's
``zero_grad(set_to_none=True)``), so a ``.grad`` tensor kept past a step sees the next step's values, as
with ``set_to_none=False``. Whatever else writes into it (a full-size backward accumulating into it,
gradient clipping, an all-reduce, a scaler's unscale) moves its version counter, and the next step then
clears all of it.

`take_used` tells an optimizer which corner of the weight the forwards that autograd recorded since it last
asked have used (`ofa.train.used_sgd`: a recipe's ``optimizer.update: used`` leaves the rest as it is). It is
read off the forward, not the gradient, so whatever scales or all-reduces the gradient in place (zeros stay
zeros) leaves it true.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class CornerGradient:
    """The reusable gradient of one weight whose leading slices the forward takes (its owner passes the weight
    in, so a module whose parameter object is replaced still gets the right one)."""

    def __init__(self) -> None:
        self.buffer: torch.Tensor | None = None
        self.dirty = (0, 0)  # the corner written since the buffer was last all zero...
        self.version = -1  # ... valid while the buffer's version counter still reads this
        self.used = (0, 0)  # the corner that recorded forwards used since `take_used` last reset it

    def slice(self, weight: nn.Parameter, out_channels: int, in_channels: int) -> torch.Tensor:
        """``weight[:out, :in]`` (the weight itself when that is all of it), contiguous as a convolution
        wants it; its gradient goes through `accumulate` when autograd records it."""
        recorded = torch.is_grad_enabled() and weight.requires_grad
        if recorded:
            self.used = (max(self.used[0], out_channels), max(self.used[1], in_channels))
        if weight.shape[:2] == (out_channels, in_channels):
            return weight
        if not recorded:
            return weight[:out_channels, :in_channels]
        return _CornerSlice.apply(weight, self, out_channels, in_channels)

    def take_used(self) -> tuple[int, int] | None:
        """The corner ``(rows, cols)`` that forwards autograd recorded have used since the last call (outside it
        the weight's gradient is zero), or None where none has; the record starts again empty."""
        used, self.used = self.used, (0, 0)
        return used if used != (0, 0) else None

    def accumulate(self, weight: nn.Parameter, grad: torch.Tensor, out_channels: int, in_channels: int) -> None:
        """Add ``grad`` (of the slice) into ``weight.grad``'s corner, starting a step's buffer where there is none."""
        buffer = self.buffer
        if weight.grad is None:
            if buffer is None or buffer.dtype != weight.dtype or buffer.device != weight.device:  # new, or moved
                buffer = self.buffer = torch.zeros_like(weight)
            elif buffer._version != self.version:
                buffer.zero_()
            else:  # what the last step wrote outside the corner this one overwrites
                rows, cols = self.dirty
                buffer[out_channels:rows, :cols].zero_()
                buffer[: min(out_channels, rows), in_channels:cols].zero_()
            buffer[:out_channels, :in_channels].copy_(grad)
            weight.grad, self.dirty = buffer, (out_channels, in_channels)
        elif weight.grad is buffer and buffer._version == self.version:
            buffer[:out_channels, :in_channels].add_(grad)
            self.dirty = (max(out_channels, self.dirty[0]), max(in_channels, self.dirty[1]))
        else:  # a gradient that is not this buffer, or one something else wrote into: leave its tracking stale
            weight.grad[:out_channels, :in_channels].add_(grad)
            return
        self.version = buffer._version


class _CornerSlice(torch.autograd.Function):
    """Forward: the contiguous slice. Backward: `CornerGradient.accumulate`, no gradient for autograd to
    accumulate (the weight's ``.grad`` is already written)."""

    @staticmethod
    def forward(
        ctx: Any, weight: torch.Tensor, corner: CornerGradient, out_channels: int, in_channels: int
    ) -> torch.Tensor:
        ctx.weight, ctx.corner, ctx.shape = weight, corner, (out_channels, in_channels)
        return weight[:out_channels, :in_channels].contiguous()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, None, None, None]:
        ctx.corner.accumulate(ctx.weight, grad, *ctx.shape)
        return None, None, None, None
