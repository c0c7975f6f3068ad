"""Data-parallel helpers over torch.distributed (``torchrun``: multi-GPU, multi-node; gloo on CPU).

Gradients are averaged with one all-reduce per optimizer step rather than by DDP: each step
runs several different subnets (and micro-batches) whose backward passes touch different
parameters, which DDP's per-backward bucketing is not built for.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from ofa.families.corner_grad import nonzero_part, writes_keeping_zeros
from ofa.utils.errors import OFAError


@dataclass(frozen=True)
class DistEnv:
    """This process's place in a torchrun job (rank 0 of 1 without torchrun) and its device."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @classmethod
    def single_process(cls, device: torch.device | str = "cpu") -> DistEnv:
        return cls(0, 1, 0, torch.device(device))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def resolve_device(spec: str, local_rank: int = 0, where: str = "device") -> torch.device:
    """``auto`` (this rank's GPU if there is one, else the CPU), ``cpu``, ``cuda`` (this rank's GPU) or ``cuda:N``.

    Raises `OFAError` (naming ``where``) for an unknown device or CUDA on a machine without it.
    """
    if spec == "auto":
        spec = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(spec)
    except RuntimeError:
        raise OFAError(f"{where}: unknown device {spec!r} (cpu, cuda, cuda:N)") from None
    if device.type != "cuda":
        return device
    if not torch.cuda.is_available():
        raise OFAError(f"{where}: {spec} requested but no CUDA device is available")
    return device if device.index is not None else torch.device("cuda", local_rank % torch.cuda.device_count())


@contextmanager
def process_group(device: str = "auto", timeout: timedelta | None = None, where: str = "device") -> Iterator[DistEnv]:
    """Join the process group torchrun describes in the environment for the ``with`` block.

    A single process (no ``WORLD_SIZE``) joins nothing. The group is left on exit only if this
    call started it. ``timeout`` bounds collectives (the default is torch's); ``device`` as in
    `resolve_device`, whose errors come before any group is joined.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    dev = resolve_device(device, local, where)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    started = world > 1 and not dist.is_initialized()
    if started:
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", timeout=timeout)
    try:
        yield DistEnv(rank, world, local, dev)
    finally:
        if started and dist.is_initialized():
            dist.destroy_process_group()


def broadcast_state(module: nn.Module, env: DistEnv) -> None:
    """Make every rank start from rank 0's weights and buffers."""
    if env.distributed:
        for t in module.state_dict().values():
            dist.broadcast(t, 0)


def average_gradients(params: list[nn.Parameter], env: DistEnv) -> None:
    """Average ``.grad`` over ranks in one flat all-reduce of what may be nonzero (every rank has the same grads
    set, and the same corners of them written)."""
    if not env.distributed:
        return
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    parts = [nonzero_part(g) for g in grads]  # a ResNet weight's gradient: the corner its subnets wrote
    flat = torch.cat([part.reshape(-1) for part in parts])
    dist.all_reduce(flat)
    flat /= env.world_size
    offset = 0
    with writes_keeping_zeros(grads):  # every rank ran the same subnets: the same zeros
        for part in parts:
            part.copy_(flat[offset : offset + part.numel()].view_as(part))
            offset += part.numel()


def all_reduce_sum(values: torch.Tensor, env: DistEnv) -> torch.Tensor:
    if env.distributed:
        dist.all_reduce(values)
    return values
