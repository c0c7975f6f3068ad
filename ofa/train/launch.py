"""Data-parallel training on this machine without ``torchrun``: ``processes`` local ranks (gloo on the CPU).

On a small CPU one process per core, one thread each, trains faster than one process with a thread per core:
a small network's kernels use a second thread poorly (the `pipeline_demo` row shows the demo's train stage).
Each rank takes its share of the recipe's batch and micro-batches, so the global batch and the batch each
BatchNorm sees are the recipe's (`tests/test_distributed.py`: weight for weight what one process trains).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
import threading
from pathlib import Path

import torch
import torch.multiprocessing as mp
from torch.multiprocessing.spawn import ProcessException

from ofa.train.loop import train
from ofa.train.recipe import Recipe
from ofa.train.resume import prepare_run_folder
from ofa.utils.errors import OFAError


def split_batch(recipe: Recipe, processes: int, where: str = "processes") -> Recipe:
    """The recipe each of ``processes`` ranks trains: ``data.batch_size`` and ``schedule.micro_batches``
    divided by ``processes`` (each must be a multiple of it). Raises `OFAError` naming ``where`` otherwise."""
    batch, micro = recipe.data.batch_size, recipe.schedule.micro_batches
    if processes < 1 or batch % processes or micro % processes:
        raise OFAError(
            f"{where}: {processes} processes must divide {recipe.source}'s data.batch_size ({batch}) and "
            f"schedule.micro_batches ({micro}): each process takes its share of both"
        )
    return dataclasses.replace(
        recipe,
        data=dataclasses.replace(recipe.data, batch_size=batch // processes),
        schedule=dataclasses.replace(recipe.schedule, micro_batches=micro // processes),
    )


def train_processes(
    recipe: Recipe, out_dir: str | Path, processes: int, resume: bool = False, where: str = "processes"
) -> Path:
    """`train` ``recipe`` (the whole batch, as one process would) on ``processes`` local ranks; returns
    ``out_dir/supernet.pt``. Each rank gets an equal share of this process's threads. A rank's `OFAError` is
    raised here, one line; a rank that dies otherwise is reported by its exit code; a batch the processes do not
    divide, naming ``where`` (the setting), and a folder that already holds a run (without ``resume``), before
    any starts."""
    if processes == 1:
        return train(recipe, out_dir, resume)
    per_rank = split_batch(recipe, processes, where)
    prepare_run_folder(out_dir, resume)  # each rank checks again: by then the folder exists and holds no run
    threads = max(1, torch.get_num_threads() // processes)
    method = start_method(threads)
    errors = mp.get_context(method).SimpleQueue()
    args = (processes, free_port(), per_rank, str(out_dir), resume, threads, errors)
    try:
        mp.start_processes(_rank, args=args, nprocs=processes, start_method=method)
    except ProcessException as exc:
        raise OFAError(errors.get() if not errors.empty() else f"a training process failed: {exc}") from None
    return Path(out_dir) / "supernet.pt"


def start_method(threads: int) -> str:
    """``fork`` where it is safe, else ``spawn``. A forked rank starts at once with this process's modules, where a
    spawned one imports torch, timm and the package again (seconds each, the `pipeline_demo` row's train stage).
    Fork is safe for a rank on one thread, from a process with no other Python thread: a rank with several
    threads would run an OpenMP pool that GNU OpenMP does not carry across a fork, a lock another thread holds
    stays held in the child, and CUDA does not survive a fork either."""
    alone = threading.active_count() == 1 and not torch.cuda.is_initialized()
    return "fork" if threads == 1 and alone and "fork" in mp.get_all_start_methods() else "spawn"


def free_port() -> int:
    """A TCP port on this machine that was free a moment ago: the ranks' rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_environment(rank: int, world: int, port: int) -> None:
    """What `process_group` reads, as torchrun sets it, for rank ``rank`` of ``world`` on this machine."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(world),
    )


def _rank(
    rank: int, world: int, port: int, recipe: Recipe, out: str, resume: bool, threads: int, errors: mp.SimpleQueue
) -> None:
    """One rank: the environment `process_group` reads, then `train`; its `OFAError` goes to ``errors``."""
    rank_environment(rank, world, port)
    torch.set_num_threads(threads)
    try:
        train(recipe, out, resume)
    except OFAError as exc:
        errors.put(str(exc))
        sys.exit(2)
