"""A weight's leading slice ``weight[:out, :in]`` whose backward does not zero-fill a full-size gradient.

A slice's own backward allocates a zero gradient the size of the whole weight every step and copies the
slice's gradient into its corner; for a small subnet of a wide supernet that memset is a large part of
what a step costs beyond its static twin (`bench.elastic_overhead`). `CornerGradient` keeps full-size
buffers per weight across steps and clears only what a buffer's last step wrote outside this step's corner,
so ``weight.grad`` holds the same values, bit for bit, as after the plain slice.

It keeps two buffers (`POOL_SIZE`), and a step takes the one with least to clear: a small subnet's step
after a wider one would otherwise clear the wider corner, which costs more than the copy of its own (a
supernet's steps alternate subnets of very different sizes). A buffer becomes ``weight.grad`` at the first
backward of a step (when ``.grad`` is None: the optimizer's ``zero_grad(set_to_none=True)``), so a
``.grad`` tensor kept past a step may see a later step's values, as with ``set_to_none=False``. Whatever
else writes into it (a full-size backward accumulating into it, a hook) moves its version counter, and it is
then cleared whole before it is used again; writes that keep every zero zero (gradient clipping, the average
over ranks that ran the same subnets) say so with `writes_keeping_zeros`, and the buffer stays tracked.

`take_used` tells an optimizer which corner of the weight the forwards that autograd recorded since it last
asked have used (`ofa.train.used_sgd`: a recipe's ``optimizer.update: used`` leaves the rest as it is). It is
read off the forward, not the gradient, so whatever scales or all-reduces the gradient in place (zeros stay
zeros) leaves it true.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

POOL_SIZE = 2  # full-size gradient buffers per weight (memory: that many gradients of every weight sliced so)


class _Buffer:
    """A full-size gradient, the corner of it that may hold nonzeros, and its corner views (made once: a step's
    Python work runs between large kernels, with cold caches, so each op it saves counts)."""

    def __init__(self, like: torch.Tensor) -> None:
        self.tensor = torch.zeros_like(like)
        self.tensor.corner_buffer = self  # found from ``weight.grad``
        self.dirty = (0, 0)  # the corner written since the tensor was last all zero...
        self.version = self.tensor._version  # ... valid while its version counter still reads this
        self.views: dict[tuple[int, int], torch.Tensor] = {}

    def corner(self, out_channels: int, in_channels: int) -> torch.Tensor:
        view = self.views.get((out_channels, in_channels))
        if view is None:
            view = self.views[out_channels, in_channels] = self.tensor[:out_channels, :in_channels]
        return view

    def written_elsewhere(self) -> bool:
        return self.tensor._version != self.version

    def to_clear(self, out_channels: int, in_channels: int) -> int:
        """How many rows x columns outside the corner ``(out, in)`` may hold nonzeros."""
        if self.written_elsewhere():
            return self.tensor.shape[0] * self.tensor.shape[1]
        rows, cols = self.dirty
        return rows * cols - min(rows, out_channels) * min(cols, in_channels)

    def clear_outside(self, out_channels: int, in_channels: int) -> None:
        if self.written_elsewhere():
            self.tensor.zero_()
        else:
            rows, cols = self.dirty
            self.tensor[out_channels:rows, :cols].zero_()
            self.tensor[: min(out_channels, rows), in_channels:cols].zero_()


class CornerGradient:
    """The reusable gradients of one weight whose leading slices the forward takes (its owner passes the weight
    in, so a module whose parameter object is replaced still gets the right one)."""

    def __init__(self) -> None:
        self.buffers: list[_Buffer] = []  # the one that is ``weight.grad`` now is ``weight.grad.corner_buffer``
        self.used = (0, 0)  # the corner that recorded forwards used since `take_used` last reset it
        self.weight_views: dict[tuple[int, int], torch.Tensor] = {}  # of the weight's storage they were made on

    def __deepcopy__(self, memo: dict[int, Any]) -> CornerGradient:
        """A fresh one: buffers, views and the record are this weight's scratch, which a copy of the network (a
        teacher, an extraction) would only hold in memory."""
        return CornerGradient()

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
        return _CornerSlice.apply(weight, self.weight_corner(weight, out_channels, in_channels), self)

    def weight_corner(self, weight: torch.Tensor, out_channels: int, in_channels: int) -> torch.Tensor:
        """The view ``weight[:out, :in]``, made once while the weight keeps its storage."""
        view = self.weight_views.get((out_channels, in_channels))
        if view is None or view.data_ptr() != weight.data_ptr():
            if view is not None:  # the weight has new storage (moved, or its data replaced): drop the old views
                self.weight_views.clear()
            view = self.weight_views[out_channels, in_channels] = weight.detach()[:out_channels, :in_channels]
        return view

    def take_used(self) -> tuple[int, int] | None:
        """The corner ``(rows, cols)`` that forwards autograd recorded have used since the last call (outside it
        the weight's gradient is zero), or None where none has; the record starts again empty."""
        used, self.used = self.used, (0, 0)
        return used if used != (0, 0) else None

    def accumulate(self, weight: nn.Parameter, grad: torch.Tensor, out_channels: int, in_channels: int) -> None:
        """Add ``grad`` (of the slice) into ``weight.grad``'s corner, starting a step's buffer where there is none."""
        if weight.grad is None:
            buffer = self._cleared(weight, out_channels, in_channels)
            buffer.corner(out_channels, in_channels).copy_(grad)
            weight.grad, buffer.dirty = buffer.tensor, (out_channels, in_channels)
        else:
            buffer = getattr(weight.grad, "corner_buffer", None)
            if buffer not in self.buffers or buffer.written_elsewhere():  # its tracking (if any) stays stale
                weight.grad[:out_channels, :in_channels].add_(grad)
                return
            buffer.corner(out_channels, in_channels).add_(grad)
            buffer.dirty = (max(out_channels, buffer.dirty[0]), max(in_channels, buffer.dirty[1]))
        buffer.version = buffer.tensor._version

    def _cleared(self, weight: nn.Parameter, out_channels: int, in_channels: int) -> _Buffer:
        """The buffer with least to clear outside the corner, cleared there (a new one while the pool has room
        and none is clear already; after the weight moves to another dtype or device, all new)."""
        if self.buffers and not _same_kind(self.buffers[0].tensor, weight):
            self.buffers = []
        best, least = None, 0
        for buffer in self.buffers:
            cost = buffer.to_clear(out_channels, in_channels)
            if best is None or cost < least:
                best, least = buffer, cost
        if best is None or (least and len(self.buffers) < POOL_SIZE):
            best, least = _Buffer(weight), 0
            self.buffers.append(best)
        if least:
            best.clear_outside(out_channels, in_channels)
        return best


@contextmanager
def writes_keeping_zeros(grads: Iterable[torch.Tensor]) -> Iterator[None]:
    """In-place writes into ``grads`` inside the block keep every zero zero (scaling by a factor; averaging over
    ranks that ran the same subnets): the corner buffers among them that were tracked before stay tracked, so
    their next step clears what lies outside its corner rather than all of them."""
    tracked = [b for g in grads if (b := getattr(g, "corner_buffer", None)) is not None and not b.written_elsewhere()]
    yield
    for buffer in tracked:
        buffer.version = buffer.tensor._version


def nonzero_part(grad: torch.Tensor) -> torch.Tensor:
    """The leading corner of ``grad`` outside which it is zero: a tracked corner buffer's written corner, or all
    of it (what an all-reduce need carry: every rank ran the same subnets, so every rank's is the same)."""
    buffer = getattr(grad, "corner_buffer", None)
    return grad if buffer is None or buffer.written_elsewhere() else buffer.corner(*buffer.dirty)


def _same_kind(tensor: torch.Tensor, weight: torch.Tensor) -> bool:
    return tensor.dtype == weight.dtype and tensor.device == weight.device


class _CornerSlice(torch.autograd.Function):
    """Forward: the corner view made contiguous. Backward: `CornerGradient.accumulate` into the weight, no
    gradient for autograd to accumulate (the weight's ``.grad`` is already written)."""

    @staticmethod
    def forward(ctx: Any, weight: torch.Tensor, view: torch.Tensor, corner: CornerGradient) -> torch.Tensor:
        ctx.weight, ctx.corner, ctx.shape = weight, corner, view.shape[:2]
        return view.contiguous()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, None, None]:
        ctx.corner.accumulate(ctx.weight, grad, *ctx.shape)
        return None, None, None
