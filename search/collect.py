"""Accuracy data for the predictor: measure random subnets of a trained supernet.

Subnet ``i`` is drawn from (seed, i), so a run can be extended or resumed and every rank knows
every subnet. Each subnet gets its BN statistics recalibrated on a fixed set of training images,
then top-1 on the validation split (never the test split). One JSON line per subnet is appended
as soon as it is measured; under torchrun rank r measures subnets i = r mod world_size into its
own part file, and rank 0 merges the parts at the end. ``repeat_split`` measures on two disjoint
halves of the validation split, to know how much of the ranking is measurement noise.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Subset

from ofa.errors import OFAError
from ofa.io import write_text
from ofa.space import Arch, SearchSpace

FILE_KIND = "ofa-accuracy"
RESUME_KEYS = ("fingerprint", "weights", "seed", "calib_batches", "batch_size", "repeat_split", "val_images")


def subnet_arch(space: SearchSpace, seed: int, index: int) -> Arch:
    """The ``index``-th random subnet of a collection seeded with ``seed``."""
    return space.sample(np.random.default_rng([seed, index]))


def weights_digest(net: torch.nn.Module) -> str:
    """Short hash of the supernet's parameters: a resumed collection must measure the same network.

    BN running statistics are left out: every measurement recalibrates them.
    """
    h = hashlib.sha256()
    for key, value in sorted(net.named_parameters()):
        h.update(key.encode())
        h.update(value.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def part_path(out: Path, rank: int) -> Path:
    return out.with_name(f"{out.name}.rank{rank}.part")


def _parts(out: Path) -> list[Path]:
    return sorted(out.parent.glob(f"{out.name}.rank*.part"))


def _read_lines(path: Path) -> tuple[list[dict[str, Any]], bool]:
    """Parsed JSON lines, and whether the file ends in a cut-off line (a crash mid-write), which is skipped."""
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise OFAError(f"{path}: not a JSON-lines accuracy file (binary content)") from None
    lines = text.split("\n")
    truncated = bool(lines[-1])
    out = []
    for no, line in enumerate(lines[:-1], 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            raise OFAError(f"{path}:{no}: not a JSON line") from None
        if not isinstance(obj, dict):
            raise OFAError(f"{path}:{no}: expected a JSON object")
        out.append(obj)
    return out, truncated


def read_accuracy(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(header, records by index) of a collection file plus any unmerged part files next to it."""
    path = Path(path)
    if not path.is_file():
        raise OFAError(f"{path}: accuracy file not found (make one with `ofa predictor collect`)")
    lines, _ = _read_lines(path)
    if not lines or lines[0].get("kind") != FILE_KIND:
        raise OFAError(f"{path}: not an accuracy file from `ofa predictor collect` (no header line)")
    header, records = lines[0], lines[1:]
    for part in _parts(path):
        records += _read_lines(part)[0]
    by_index: dict[int, dict[str, Any]] = {}
    for rec in records:
        if not isinstance(rec.get("index"), int) or not isinstance(rec.get("arch"), dict) or "top1" not in rec:
            raise OFAError(f"{path}: malformed record {json.dumps(rec)[:80]} (needs index, arch, top1)")
        by_index.setdefault(rec["index"], rec)
    return header, [by_index[i] for i in sorted(by_index)]


@dataclass
class AccuracyData:
    """A collection as arrays: what `fit_predictor` consumes."""

    space: SearchSpace
    rows: np.ndarray
    top1: np.ndarray
    halves: tuple[np.ndarray, np.ndarray] | None
    header: dict[str, Any]


def load_accuracy(path: str | Path) -> AccuracyData:
    header, records = read_accuracy(path)
    space = SearchSpace.from_dict(header.get("space") or {}, f"{path}: header.space")
    rows = space.encode_many([
        space.validate(Arch.from_dict(r["arch"], f"{path}: subnet {r['index']}"), f"{path}: subnet {r['index']}")
        for r in records
    ])
    keys = ("top1", "top1_a", "top1_b") if header.get("repeat_split") else ("top1",)
    values = np.zeros((len(keys), len(records)))
    for j, rec in enumerate(records):
        for k, key in enumerate(keys):
            try:
                values[k, j] = float(rec[key])
            except (KeyError, TypeError, ValueError):
                raise OFAError(f"{path}: subnet {rec['index']}: {key!r} missing or not a number") from None
    halves = (values[1], values[2]) if len(keys) == 3 else None
    return AccuracyData(space, rows, values[0], halves, header)


def merge_parts(out: str | Path) -> int:
    """Fold rank part files into ``out`` (sorted by index, atomically), then remove them; returns the count."""
    out = Path(out)
    parts = _parts(out)
    header, records = read_accuracy(out)
    if parts or _read_lines(out)[1]:
        write_text(out, "".join(json.dumps(r) + "\n" for r in [header, *records]))
        for part in parts:
            part.unlink(missing_ok=True)
    return len(records)


def _repair(path: Path) -> None:
    """Drop a cut-off last line so appends start on a fresh line (complete lines are kept)."""
    if path.is_file() and _read_lines(path)[1]:
        text = path.read_text()
        write_text(path, text[: text.rfind("\n") + 1])


def _append(path: Path, obj: dict[str, Any]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(obj) + "\n")
        f.flush()
        os.fsync(f.fileno())


def split_halves(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two disjoint halves of ``range(n)`` (seeded), each sorted."""
    perm = np.random.default_rng([seed, n]).permutation(n)
    return np.sort(perm[: n // 2]), np.sort(perm[n // 2:])


def collect(net: Any, train_set: Dataset, val_set: Dataset, out: str | Path, n: int, *, seed: int = 0,
            calib_batches: int = 20, batch_size: int = 100, repeat_split: bool = False,
            device: torch.device | str = "cpu", rank: int = 0, world_size: int = 1, progress: bool = True,
            supernet: str = "", num_workers: int = 0) -> int:
    """Measure subnets ``0..n-1`` not yet in ``out``; returns how many this rank measured.

    ``net`` is an `OFAMobileNetV3`; ``train_set`` feeds BN recalibration (the same seeded
    ``calib_batches x batch_size`` images for every subnet), ``val_set`` is the held-out split.
    """
    from tqdm import tqdm

    from ofa.bn import recalibrate_bn
    from ofa.data import make_loader
    from ofa.evaluate import evaluate

    if n < 1:
        raise OFAError(f"--n must be at least 1, got {n}")
    if len(val_set) < (2 if repeat_split else 1):
        raise OFAError(f"the validation split has {len(val_set)} images: too few to measure subnets")
    out, space = Path(out), net.space
    calib_ids = np.random.default_rng(seed).permutation(len(train_set))[: calib_batches * batch_size]
    header = {
        "kind": FILE_KIND, "space": space.to_dict(), "fingerprint": space.fingerprint(),
        "weights": weights_digest(net), "supernet": str(supernet), "seed": seed, "calib_batches": calib_batches,
        "batch_size": batch_size, "calib_images": len(calib_ids), "val_images": len(val_set),
        "repeat_split": repeat_split,
    }
    if out.is_file():
        old = _read_lines(out)[0][:1]
        if not old or old[0].get("kind") != FILE_KIND:
            raise OFAError(f"{out}: exists and is not an accuracy file; choose another --out")
        for key in RESUME_KEYS:
            if old[0].get(key) != header[key]:
                raise OFAError(f"{out}: was collected with {key}={old[0].get(key)!r}, this run has "
                               f"{header[key]!r}; resume with the same supernet and settings or choose another --out")
    elif rank == 0:
        write_text(out, json.dumps(header) + "\n")
    sink = out if world_size == 1 else part_path(out, rank)
    _repair(sink)
    done = {r["index"] for r in read_accuracy(out)[1]} if out.is_file() else set()
    todo = [i for i in range(n) if i % world_size == rank and i not in done]

    def loader(ds: Dataset) -> DataLoader:
        return make_loader(ds, batch_size, shuffle=False, seed=seed, num_workers=num_workers)

    calib = loader(Subset(train_set, calib_ids.tolist()))
    if repeat_split:
        halves = split_halves(len(val_set), seed)
        evals: Iterable = [loader(Subset(val_set, h.tolist())) for h in halves]
    else:
        evals = [loader(val_set)]
    net.to(device).eval()
    for i in tqdm(todo, desc=f"collect (rank {rank})" if world_size > 1 else "collect", unit="subnet",
                  disable=not progress or rank != 0):
        arch = subnet_arch(space, seed, i)
        net.set_active(arch)
        recalibrate_bn(net, calib, calib_batches, device=device, resolution=arch.resolution)
        results = [evaluate(net, ev, arch.resolution, device=device) for ev in evals]
        count = sum(r["count"] for r in results)
        rec = {
            "index": i, "arch": arch.to_dict(),
            "top1": sum(r["top1"] * r["count"] for r in results) / count,
            "loss": sum(r["loss"] * r["count"] for r in results) / count, "count": count,
            "macs": space.macs(arch), "params": space.params(arch),
        }
        if repeat_split:
            rec.update(top1_a=results[0]["top1"], top1_b=results[1]["top1"], count_a=results[0]["count"],
                       count_b=results[1]["count"])
        _append(sink, rec)
    _finish(out, rank, world_size)
    return len(todo)


def _finish(out: Path, rank: int, world_size: int) -> None:
    import torch.distributed as dist

    if world_size > 1 and dist.is_available() and dist.is_initialized():
        dist.barrier()
    if rank == 0:
        merge_parts(out)
