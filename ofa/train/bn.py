"""Batch-norm recalibration: re-estimate running statistics for the active (sub)network.

A subnet's BN statistics are not those of the supernet that trained it, so every evaluation of a
subnet first recomputes them on a few training batches (OFA's ``set_running_statistics``), with
its images resized to the subnet's resolution (`resize`, shared with evaluation and training).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.utils.data import DataLoader

from ofa.data.loaders import set_loader_epoch


def resize(x: torch.Tensor, resolution: int | None) -> torch.Tensor:
    """Elastic resolution: bilinearly resize a batch to ``resolution`` (no-op if it already is)."""
    if resolution is None or (x.shape[-1] == resolution and x.shape[-2] == resolution):
        return x
    return F.interpolate(x, size=(resolution, resolution), mode="bilinear", align_corners=False, antialias=True)


KEEP_BYTES = 512 * 2**20  # calibration images kept in memory at the most (more are drawn again each time)


class CalibrationBatches:
    """A loader's batches at augmentation epoch 0, kept as drawn and replayed to every recalibration.

    Every subnet recalibrates on the same images (as the official code keeps its sub-train batches), and
    drawing them again, each image augmented, cost more than a small subnet's forward passes (the demo
    recalibrates some 35 subnets). A pass draws only the batches past the kept ones, at epoch 0 whatever
    epoch the shared training split is at; beyond ``KEEP_BYTES`` batches are drawn again each time.
    """

    def __init__(self, loader: DataLoader) -> None:
        self.loader = loader
        self._kept: list[Any] = []
        self._bytes = 0
        self._full = False

    def __iter__(self) -> Iterator[Any]:
        yield from self._kept
        set_loader_epoch(self.loader, 0, start_batch=len(self._kept))
        for batch in self.loader:
            size = sum(t.nbytes for t in (batch if isinstance(batch, list | tuple) else [batch]) if torch.is_tensor(t))
            self._full = self._full or self._bytes + size > KEEP_BYTES
            if not self._full:
                self._kept.append(batch)
                self._bytes += size
            yield batch


@torch.no_grad()
def recalibrate_bn(
    model: nn.Module,
    loader: Iterable,
    batches: int,
    device: torch.device | str | None = None,
    resolution: int | None = None,
    sync: bool = False,
) -> int:
    """Reset and re-estimate every BN's running mean/var over ``batches`` batches of ``loader``.

    Statistics are exact averages of per-batch mean and (unbiased) variance, written only into the
    channels the active subnet uses, so a supernet keeps the statistics of its other channels.
    ``resolution`` resizes inputs (elastic resolution). ``sync=True`` averages over all ranks (each
    rank holding a shard of the data, all running the same subnet). Returns the batches used.
    """
    bns = [m for m in model.modules() if isinstance(m, _BatchNorm)]
    sums: dict[nn.Module, list] = {}

    def hook(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        x = inputs[0].float()
        mean, n = x.mean((0, 2, 3)), x.numel() // x.shape[1]
        # Two passes (the mean, then the squared deviations from it): on a CPU `Tensor.var` over these dims is
        # several times slower, and was a large part of measuring a small subnet (`ofa pipeline`'s collect).
        var = (x - mean[:, None, None]).square().sum((0, 2, 3)) / (n - 1) if n > 1 else torch.zeros_like(mean)
        acc = sums.setdefault(module, [torch.zeros_like(mean), torch.zeros_like(var), 0])
        acc[0] += mean
        acc[1] += var
        acc[2] += 1

    handles = [bn.register_forward_pre_hook(hook) for bn in bns]
    was_training = model.training
    model.train()
    used = 0
    try:
        for batch in itertools.islice(loader, batches):  # no batch drawn past the last one used
            x = batch[0] if isinstance(batch, list | tuple) else batch
            if device is not None:
                x = x.to(device)
            model(resize(x, resolution))
            used += 1
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    distributed = sync and dist.is_available() and dist.is_initialized()
    for bn, (mean_sum, var_sum, n) in sums.items():
        count = torch.tensor(float(n), device=mean_sum.device)
        if distributed:
            for t in (mean_sum, var_sum, count):
                dist.all_reduce(t)
        c = mean_sum.numel()
        bn.running_mean[:c] = mean_sum / count
        bn.running_var[:c] = var_sum / count
    return used
