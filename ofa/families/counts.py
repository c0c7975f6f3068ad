"""Parameters and MACs of a built model, counted the same way for every family (what its layer specs must equal)."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def count_macs(model: nn.Module, resolution: int, in_channels: int = 3) -> int:
    """MACs measured by torch's FLOP counter (FLOPs / 2) for one image."""
    was_training = model.training
    model.eval()
    counter = FlopCounterMode(display=False)
    with counter:
        model(torch.zeros(1, in_channels, resolution, resolution))
    model.train(was_training)
    return counter.get_total_flops() // 2
