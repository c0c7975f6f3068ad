"""Knowledge distillation: a frozen teacher copy and the soft cross-entropy loss."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from ofa.families.family import Supernet


def soft_cross_entropy(logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Cross-entropy against the teacher's softened distribution, scaled by T² (Hinton et al.)."""
    t = temperature
    target = F.softmax(teacher_logits.detach().float() / t, dim=1)
    return -(target * F.log_softmax(logits.float() / t, dim=1)).sum(1).mean() * (t * t)


def frozen_teacher(net: Supernet) -> Supernet:
    """A copy of the full network that never changes.

    It runs in training mode like OFA's teacher (batch statistics, robust to elastic resolution)
    but without dropout, and with BN momentum 0 so its running statistics stay as copied.
    """
    teacher = net.copy()
    teacher.set_active(teacher.space.max_arch())
    teacher.requires_grad_(False)
    teacher.train()
    teacher.dropout.eval()
    for m in teacher.modules():
        if isinstance(m, _BatchNorm):
            m.momentum = 0.0
    return teacher
