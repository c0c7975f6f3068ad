"""Data-parallel helpers over torch.distributed (``torchrun``: multi-GPU, multi-node; gloo on CPU).

Gradients are averaged with one all-reduce per optimizer step rather than by DDP: each step
runs several different subnets (and micro-batches) whose backward passes touch different
parameters, which DDP's per-backward bucketing is not built for.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def init_distributed(device: str = "auto") -> DistEnv:
    """Join the process group torchrun describes in the environment (a single process otherwise)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if cuda and not torch.cuda.is_available():
        from ofa.errors import OFAError

        raise OFAError("device: cuda requested but no CUDA device is available")
    dev = torch.device("cuda", local % torch.cuda.device_count()) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
    return DistEnv(rank, world, local, dev)


def shutdown(env: DistEnv) -> None:
    if env.distributed and dist.is_initialized():
        dist.destroy_process_group()


def broadcast_state(module: nn.Module, env: DistEnv) -> None:
    """Make every rank start from rank 0's weights and buffers."""
    if env.distributed:
        for t in module.state_dict().values():
            dist.broadcast(t, 0)


def average_gradients(params: list[nn.Parameter], env: DistEnv) -> None:
    """Average ``.grad`` over ranks in one flat all-reduce (every rank has the same grads set)."""
    if not env.distributed:
        return
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= env.world_size
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def all_reduce_sum(values: torch.Tensor, env: DistEnv) -> torch.Tensor:
    if env.distributed:
        dist.all_reduce(values)
    return values
