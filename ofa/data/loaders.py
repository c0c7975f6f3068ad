"""Loaders that shard a split over ranks and resume mid-epoch exactly: batch order fixed by (seed, epoch)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from torch.utils.data import DataLoader, Dataset, Sampler


class ShardedBatchSampler(Sampler[list[int]]):
    """Batches of one rank, in an order fixed by (seed, epoch).

    Each global batch of ``batch_size * world_size`` consecutive images of the epoch order is cut
    into one block per rank, so ranks together see what one process with the global batch (cut
    into micro-batches) sees. ``drop_last`` drops the incomplete global batch (training: every
    rank takes the same number of steps); otherwise every image is seen exactly once (evaluation).
    """

    def __init__(
        self,
        size: int,
        batch_size: int,
        *,
        shuffle: bool,
        seed: int,
        drop_last: bool,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world of {world_size}")
        self.size, self.batch_size, self.shuffle, self.seed = size, batch_size, shuffle, seed
        self.drop_last, self.rank, self.world_size = drop_last, rank, world_size
        self.epoch, self.start_batch = 0, 0

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        """Select the epoch's order and skip its first ``start_batch`` batches (resume)."""
        self.epoch, self.start_batch = epoch, start_batch

    def _batches(self) -> list[list[int]]:
        if self.shuffle:
            order = np.random.default_rng([self.seed, self.epoch]).permutation(self.size)
        else:
            order = np.arange(self.size)
        glob = self.batch_size * self.world_size
        count = self.size // glob if self.drop_last else math.ceil(self.size / glob)
        out = []
        for t in range(count):
            lo = t * glob + self.rank * self.batch_size
            block = order[lo : min(lo + self.batch_size, (t + 1) * glob, self.size)]
            if len(block):
                out.append(block.tolist())
        return out

    def __iter__(self):
        yield from self._batches()[self.start_batch :]

    def __len__(self) -> int:
        return max(0, len(self._batches()) - self.start_batch)


@dataclass(frozen=True)
class LoaderOptions:
    """How this process reads a dataset: its shard of every batch, and its worker processes.

    ``persistent_workers`` keeps worker processes between passes (evaluation loaders); workers
    hold a copy of the dataset, so only use it where the augmentation epoch never changes.
    """

    rank: int = 0
    world_size: int = 1
    num_workers: int = 0
    pin_memory: bool = False
    persistent_workers: bool = False


def make_loader(
    dataset: Dataset,
    batch_size: int,
    *,
    shuffle: bool,
    seed: int,
    drop_last: bool = False,
    options: LoaderOptions = LoaderOptions(),
) -> DataLoader:
    """A DataLoader whose order depends only on (seed, epoch) and which holds this rank's shard.

    See `ShardedBatchSampler` for how batches are cut and `set_loader_epoch` for epochs and resume.
    """
    o = options
    sampler = ShardedBatchSampler(
        len(dataset), batch_size, shuffle=shuffle, seed=seed, drop_last=drop_last, rank=o.rank, world_size=o.world_size
    )
    return DataLoader(
        dataset,
        batch_sampler=sampler,
        num_workers=o.num_workers,
        pin_memory=o.pin_memory,
        persistent_workers=o.persistent_workers and o.num_workers > 0,
    )


def set_loader_epoch(loader: DataLoader, epoch: int, start_batch: int = 0) -> None:
    """Epoch of both the batch order and the augmentation; skip ``start_batch`` batches."""
    loader.batch_sampler.set_epoch(epoch, start_batch)
    if hasattr(loader.dataset, "set_epoch"):
        loader.dataset.set_epoch(epoch)
