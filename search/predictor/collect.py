"""Accuracy data for the predictor: measure random subnets of a trained supernet.

Subnet ``i`` is drawn from (seed, i), so a run can be extended or resumed and every rank knows
every subnet. Each subnet gets its BN statistics recalibrated on a fixed set of training images,
then top-1 on the validation split (never the test split). One JSON line per subnet is appended
as soon as it is measured; under torchrun rank r measures subnets i = r mod world_size into its
own part file, and rank 0 merges the parts at the end. ``repeat_split`` measures on two disjoint
halves of the validation split, to know how much of the ranking is measurement noise.

``dtype="int8"`` also measures each subnet's top-1 after post-training quantization (``top1_int8`` beside the
float32 ``top1`` in each row, ``dtype`` in the header). Quantizing needs onnxruntime, a layer to the right of
this one, so the measurement is handed in (`Int8Top1`; `ofa.export.int8_accuracy.int8_top1` is the one the
command and the pipeline pass): calibrated on training images as ``ofa export --int8`` draws them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset
from tqdm import tqdm

from ofa.data.datasets import DataBundle, data_from_meta
from ofa.data.loaders import LoaderOptions, make_loader
from ofa.families.family import Arch, Space, Supernet
from ofa.families.registry import family_of, load_supernet
from ofa.train.bn import CalibrationBatches, recalibrate_bn
from ofa.train.distributed import DistEnv, process_group
from ofa.train.evaluate import evaluate
from ofa.utils.errors import OFAError
from ofa.utils.fields import field_label
from ofa.utils.io import write_text
from search.latency import check_known_dtype
from search.predictor.accuracy_file import (
    FILE_KIND,
    append_line,
    merge_parts,
    part_path,
    read_accuracy,
    read_lines,
    repair,
)

RESUME_KEYS = (
    "fingerprint",
    "weights",
    "seed",
    "calib_batches",
    "batch_size",
    "repeat_split",
    "val_images",
    "dtype",
)


@dataclass(frozen=True)
class Int8Inputs:
    """What one subnet's INT8 top-1 is measured from: ``images`` calibration images of ``calib`` (the data's
    ``calib`` split) drawn with ``seed`` (as ``ofa export --int8`` draws them) in batches of ``batch_size``, and
    the loaders of the float32 top-1 (``evals``: the validation split, or its halves), so both figures are paired."""

    calib: Dataset
    images: int
    batch_size: int
    seed: int
    evals: tuple[DataLoader, ...]


# (static subnet in eval mode with its recalibrated BN, its input (channels, height, width), inputs) -> top-1 %
Int8Top1 = Callable[[nn.Module, tuple[int, int, int], Int8Inputs], float]


def subnet_arch(space: Space, seed: int, index: int) -> Arch:
    """The ``index``-th random subnet of a collection seeded with ``seed``."""
    return family_of(space).sample_arch(space, np.random.default_rng([seed, index]))


def weights_digest(net: torch.nn.Module) -> str:
    """Short hash of the supernet's parameters: a resumed collection must measure the same network.

    BN running statistics are left out: every measurement recalibrates them.
    """
    h = hashlib.sha256()
    for key, value in sorted(net.named_parameters()):
        h.update(key.encode())
        h.update(value.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def split_halves(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two disjoint halves of ``range(n)`` (seeded), each sorted."""
    perm = np.random.default_rng([seed, n]).permutation(n)
    return np.sort(perm[: n // 2]), np.sort(perm[n // 2 :])


@dataclass(frozen=True)
class CollectConfig:
    """Settings of a collection (``ofa predictor collect``'s options): ``n`` subnets drawn from ``seed``, each
    recalibrated on the same ``calib_batches x batch_size`` training images, then measured on the validation
    split (or its two halves, ``repeat_split``). ``supernet`` is the label recorded in the file's header."""

    n: int = field(
        default=1000,
        metadata={
            "flag": ("--n", "--subnets"),
            "help": "number of subnets (spell it --subnets after torchrun, whose own parser takes --n for one of "
            "its flags)",
        },
    )
    seed: int = field(default=0, metadata={"help": "seed of the subnets, calibration images and halves"})
    calib_batches: int = field(default=20, metadata={"metavar": "N", "help": "BN recalibration batches"})
    batch_size: int = field(default=100, metadata={"metavar": "B", "help": "images per batch"})
    repeat_split: bool = field(
        default=False,
        metadata={"help": "also measure each subnet on two disjoint halves of the validation split (test-retest)"},
    )
    num_workers: int = field(default=0, metadata={"flag": "--workers", "help": "data-loader worker processes"})
    dtype: Literal["float32", "int8"] = field(
        default="float32",
        metadata={
            "help": "int8: also measure each subnet's top-1 after INT8 post-training quantization (QDQ U8S8, "
            "calibrated on calib_batches x batch_size training images as `ofa export --int8` draws them), "
            "recorded as top1_int8 beside the float32 top1"
        },
    )
    progress: bool = True
    supernet: str = ""

    def __post_init__(self) -> None:
        check_known_dtype(self.dtype, field_label(CollectConfig, "dtype"))
        for name in ("n", "calib_batches", "batch_size"):
            if getattr(self, name) <= 0:
                raise OFAError(f"{field_label(CollectConfig, name)} must be positive, got {getattr(self, name)}")
        if self.num_workers < 0:
            raise OFAError(f"{field_label(CollectConfig, 'num_workers')} must be >= 0, got {self.num_workers}")


@dataclass(frozen=True)
class CollectResult:
    """What one process did: ``measured`` subnets into ``out``, which then holds ``total`` (rank 0;
    None on the other ranks, which do not wait for the merge)."""

    out: Path
    measured: int
    total: int | None
    rank: int
    world_size: int


def collect(
    net: Supernet,
    data: DataBundle,
    out: str | Path,
    cfg: CollectConfig,
    env: DistEnv | None = None,
    int8: Int8Top1 | None = None,
) -> CollectResult:
    """Measure subnets ``0..n-1`` of ``net`` not yet in ``out`` (``env``: this process's rank and device).

    ``data.calib`` feeds BN recalibration (the same seeded images for every subnet), ``data.val``
    is the held-out split. ``int8`` measures a subnet's INT8 top-1 (needed when ``cfg.dtype`` is int8).
    Raises `OFAError` when the validation split is too small, INT8 is asked without ``int8``, or
    ``out`` exists but is not an accuracy file of the same supernet weights and settings.
    """
    env = env or DistEnv.single_process()
    if len(data.val) < (2 if cfg.repeat_split else 1):
        raise OFAError(f"the validation split has {len(data.val)} images: too few to measure subnets")
    if cfg.dtype == "int8" and int8 is None:
        raise OFAError(f"{field_label(CollectConfig, 'dtype')} int8: no INT8 measurement was given (int8=...)")
    out, space = Path(out), net.space
    calib_ids = np.random.default_rng(cfg.seed).permutation(len(data.calib))[: cfg.calib_batches * cfg.batch_size]
    _open_output(out, _header(net, data, cfg, len(calib_ids)), env.rank)
    sink = out if env.world_size == 1 else part_path(out, env.rank)
    repair(sink)
    done = {r["index"] for r in read_accuracy(out)[1]} if out.is_file() else set()
    todo = [i for i in range(cfg.n) if i % env.world_size == env.rank and i not in done]

    def loader(ds: Dataset) -> DataLoader:
        return make_loader(
            ds, cfg.batch_size, shuffle=False, seed=cfg.seed, options=LoaderOptions(num_workers=cfg.num_workers)
        )

    calib = CalibrationBatches(loader(Subset(data.calib, calib_ids.tolist())))
    if cfg.repeat_split:
        evals = [loader(Subset(data.val, h.tolist())) for h in split_halves(len(data.val), cfg.seed)]
    else:
        evals = [loader(data.val)]
    inputs = Int8Inputs(data.calib, len(calib_ids), cfg.batch_size, cfg.seed, tuple(evals))
    measure_int8 = int8 if cfg.dtype == "int8" else None
    net.to(env.device).eval()
    for i in tqdm(
        todo,
        desc=f"collect (rank {env.rank})" if env.distributed else "collect",
        unit="subnet",
        disable=not cfg.progress or not env.is_main,
    ):
        arch = subnet_arch(space, cfg.seed, i)
        rec = _measure(net, arch, i, calib, evals, cfg, env.device)
        if measure_int8 is not None:
            shape = (space.in_channels, arch.resolution, arch.resolution)
            rec["top1_int8"] = float(measure_int8(net.extract(arch).cpu().eval(), shape, inputs))
        append_line(sink, rec)
    total = _finish(out, env.rank, env.world_size)
    return CollectResult(out, len(todo), total, env.rank, env.world_size)


def _header(net: Supernet, data: DataBundle, cfg: CollectConfig, calib_images: int) -> dict[str, Any]:
    """The collection's first line: what was measured, and everything a resumed run must repeat."""
    space = net.space
    return {
        "kind": FILE_KIND,
        "space": space.to_dict(),
        "fingerprint": space.fingerprint(),
        "weights": weights_digest(net),
        "supernet": str(cfg.supernet),
        "seed": cfg.seed,
        "calib_batches": cfg.calib_batches,
        "batch_size": cfg.batch_size,
        "calib_images": calib_images,
        "val_images": len(data.val),
        "repeat_split": cfg.repeat_split,
        "dtype": cfg.dtype,
        **(
            {"int8": {"calibration": "training images drawn as `ofa export --int8` draws them"}}
            if cfg.dtype == "int8"
            else {}
        ),
    }


def _open_output(out: Path, header: dict[str, Any], rank: int) -> None:
    """Start ``out`` with ``header`` (rank 0), or check that the collection there is this one."""
    if out.is_file():
        old = read_lines(out)[0][:1]
        if not old or old[0].get("kind") != FILE_KIND:
            raise OFAError(f"{out}: exists and is not an accuracy file; choose another --out")
        first = {"dtype": "float32", **old[0]}  # collections from before INT8 name no dtype
        for key in RESUME_KEYS:
            if first.get(key) != header[key]:
                raise OFAError(
                    f"{out}: was collected with {key}={first.get(key)!r}, this run has "
                    f"{header[key]!r}; resume with the same supernet and settings or choose another --out"
                )
    elif rank == 0:
        write_text(out, json.dumps(header) + "\n")


def _measure(
    net: Supernet,
    arch: Arch,
    index: int,
    calib: DataLoader,
    evals: list[DataLoader],
    cfg: CollectConfig,
    device: torch.device,
) -> dict[str, Any]:
    """One subnet's record: BN recalibrated on ``calib``, then top-1/loss over ``evals`` (and per half)."""
    space = net.space
    net.set_active(arch)
    recalibrate_bn(net, calib, cfg.calib_batches, device=device, resolution=arch.resolution)
    results = [evaluate(net, ev, arch.resolution, device=device) for ev in evals]
    count = sum(r["count"] for r in results)
    rec = {
        "index": index,
        "arch": arch.to_dict(),
        "top1": sum(r["top1"] * r["count"] for r in results) / count,
        "loss": sum(r["loss"] * r["count"] for r in results) / count,
        "count": count,
        "macs": space.macs(arch),
        "params": space.params(arch),
    }
    if cfg.repeat_split:
        rec.update(
            top1_a=results[0]["top1"],
            top1_b=results[1]["top1"],
            count_a=results[0]["count"],
            count_b=results[1]["count"],
        )
    return rec


def _finish(out: Path, rank: int, world_size: int) -> int | None:
    """Wait for every rank, then rank 0 merges the part files; returns the merged count on rank 0."""
    if world_size > 1 and dist.is_available() and dist.is_initialized():
        dist.barrier()
    return merge_parts(out) if rank == 0 else None


def collect_from_checkpoint(
    checkpoint: str | Path,
    cfg: CollectConfig,
    out: str | Path | None = None,
    device: str = "auto",
    int8: Int8Top1 | None = None,
) -> CollectResult:
    """`collect` for a supernet file or training checkpoint, on the data it was trained on.

    ``out`` defaults to ``acc.jsonl`` next to the checkpoint; ``device`` is ``auto`` (this rank's
    GPU if any), ``cpu``, ``cuda`` or ``cuda:N``. Under ``torchrun`` the subnets are shared across
    ranks (rank 0 merges at the end; collectives wait up to a day for the slowest rank). Raises
    `OFAError` for an unknown device, a file that is no supernet, a supernet without recorded data
    or validation split, and the errors of `collect` (``int8`` as there).
    """
    with process_group(device, timeout=timedelta(hours=24), where="--device") as env:
        net = load_supernet(checkpoint)
        if not net.meta.get("data"):
            raise OFAError(
                f"{checkpoint}: records no data section, so its validation split is unknown (train it with `ofa train`)"
            )
        data = data_from_meta(net.meta)
        if data.val is None or len(data.val) == 0:
            raise OFAError(f"{checkpoint}: its data has no validation split to measure subnets on")
        out = Path(out) if out else Path(checkpoint).parent / "acc.jsonl"
        return collect(net, data, out, dataclasses.replace(cfg, supernet=str(checkpoint)), env, int8)
