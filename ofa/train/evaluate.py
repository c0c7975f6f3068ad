"""Accuracy of a model or of one subnet of a supernet (after BN recalibration), at a given input resolution."""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ofa.families.family import Arch
from ofa.train.bn import recalibrate_bn, resize


@torch.no_grad()
def evaluate(
    model: nn.Module,
    loader: Iterable,
    resolution: int | None = None,
    device: torch.device | str = "cpu",
    sync: bool = False,
) -> dict[str, float]:
    """Top-1 accuracy (percent), mean cross-entropy and sample count over ``loader``.

    ``sync=True`` sums over ranks when each rank holds a shard of the data.
    """
    was_training = model.training
    model.eval()
    totals = torch.zeros(3, dtype=torch.float64)
    try:
        for x, y in loader:
            x, y = resize(x.to(device), resolution), y.to(device)
            logits = model(x).float()
            totals += torch.tensor(
                [
                    (logits.argmax(1) == y).sum().item(),
                    F.cross_entropy(logits, y, reduction="sum").item(),
                    y.numel(),
                ],
                dtype=torch.float64,
            )
    finally:
        model.train(was_training)
    if sync and dist.is_available() and dist.is_initialized():
        totals = totals.to(device)  # NCCL reduces only CUDA tensors
        dist.all_reduce(totals)
        totals = totals.cpu()
    correct, loss, count = totals.tolist()
    count = max(count, 1.0)
    return {"top1": 100.0 * correct / count, "loss": loss / count, "count": int(totals[2].item())}


def evaluate_arch(
    net: nn.Module,
    arch: Arch,
    calib_loader: Iterable,
    eval_loader: Iterable,
    calib_batches: int = 20,
    device: torch.device | str = "cpu",
    sync: bool = False,
) -> dict[str, float]:
    """Activate ``arch`` in a supernet, recalibrate its BN on training images, then evaluate it."""
    net.set_active(arch)
    recalibrate_bn(net, calib_loader, calib_batches, device=device, resolution=arch.resolution, sync=sync)
    return evaluate(net, eval_loader, arch.resolution, device=device, sync=sync)
