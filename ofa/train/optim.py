"""Optimizer per phase and the learning-rate schedule (linear warmup, then cosine or constant)."""

from __future__ import annotations

import math

import torch
from torch import nn

from ofa.train.recipe import OptimizerConfig, PhaseConfig, ScheduleConfig
from ofa.train.used_sgd import UsedWeightsSGD


def build_optimizer(net: nn.Module, cfg: OptimizerConfig, lr: float) -> torch.optim.Optimizer:
    """SGD (Nesterov) or AdamW; BN parameters and biases (every 1-D tensor) get no weight decay. SGD updates only
    what each step used with ``update: used`` (`UsedWeightsSGD`)."""
    decay, no_decay = [], []
    for p in net.parameters():
        if p.requires_grad:
            (no_decay if cfg.no_decay_bn_bias and p.ndim <= 1 else decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if cfg.name == "adamw":
        return torch.optim.AdamW(groups, lr=lr, betas=tuple(cfg.betas))
    if cfg.update == "used":
        return UsedWeightsSGD(net, groups, lr=lr, momentum=cfg.momentum, nesterov=cfg.nesterov)
    return torch.optim.SGD(groups, lr=lr, momentum=cfg.momentum, nesterov=cfg.nesterov)


def lr_at(step: int, steps_per_epoch: int, phase: PhaseConfig, schedule: ScheduleConfig, scale: float = 1.0) -> float:
    """Learning rate of step ``step`` (counted from the start of the phase)."""
    base = phase.lr * scale
    warmup = phase.warmup_epochs * steps_per_epoch
    if step < warmup:
        return base * (step + 1) / warmup
    if schedule.lr_schedule == "constant":
        return base
    progress = (step - warmup) / max(1, phase.epochs * steps_per_epoch)
    return schedule.min_lr + (base - schedule.min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
