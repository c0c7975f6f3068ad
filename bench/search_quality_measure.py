"""What `bench.search_quality` measures with: the supernet (trained once, found where the PS bench keeps
its runs, `supernet_path`), the image sets its accuracies are taken on, a cache of every measured subnet, the latency
table, and whole-subnet timings.

Image sets: the validation split is halved by a fixed seed (``search.predictor.collect.split_halves``):
half A is the predictor's (its data is collected there), half B the truth's, itself halved into B1
(where the best of the K subnets is chosen) and B2 (where every figure is scored). Every subnet's BN
statistics are recalibrated on the same training images as the predictor's data (the collection's rule).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import DataLoader, Subset
from tqdm import tqdm

from bench.common import DATA, ROOT
from bench.ps_runs import recipe_digest
from ofa.data.datasets import DataBundle
from ofa.data.loaders import make_loader
from ofa.families.family import Arch, Space, Supernet
from ofa.families.genes import GeneLayoutBase
from ofa.families.registry import layout_of
from ofa.lut.build import TableBuildConfig, build_table
from ofa.lut.layer_models import subnet_runners
from ofa.lut.protocols import protocol_from_dict, time_models
from ofa.lut.timing import Standalone
from ofa.runtime.runtimes import runtime_info
from ofa.train import Recipe, train
from ofa.train.bn import recalibrate_bn
from ofa.train.evaluate import evaluate
from ofa.utils.io import read_yaml, write_json
from search.latency import LatencyTable
from search.predictor.collect import split_halves

PS_RUNS = DATA / "ps_runs"  # where bench.ps_vs_scratch keeps its supernet runs, by the same key
OWN_RUNS = ROOT / "runs" / "bench"  # a supernet trained here because the PS folder keeps only records
BATCH = 100  # images per batch, recalibration and evaluation (the collection's default)
TIMED_AT_ONCE = 8  # whole subnets loaded together for timing (as `ofa lut check` bounds its memory)


def supernet_path(recipe: Recipe, runs: Path = PS_RUNS, own: Path = OWN_RUNS) -> Path:
    """The recipe's trained supernet: the PS bench's run of it (``runs/ps-KEY``) if it has weights, else
    trained (or resumed) there; where that folder holds a finished run's records without its weights (a
    clone), the records stay as they are and the supernet is trained in ``own/supernet-KEY`` instead."""
    key = recipe_digest(recipe)
    ps_dir, own_dir = runs / f"ps-{key}", own / f"supernet-{key}"
    for folder in (ps_dir, own_dir):
        if (folder / "supernet.pt").exists():
            return folder / "supernet.pt"
    if not ps_dir.exists() or (ps_dir / "checkpoints").is_dir():
        return train(recipe, ps_dir, resume=True)
    return train(recipe, own_dir, resume=True)


@dataclass
class ImageSets:
    """The loaders the figures are measured on (see the module docstring) and their image counts."""

    calib: DataLoader
    calib_batches: int
    parts: dict[str, DataLoader]  # a, b1, b2, test
    counts: dict[str, int]
    predictor_data: DataBundle  # the data with its validation split cut to half A, for `collect`


def image_sets(data: DataBundle, seed: int, calib_batches: int) -> ImageSets:
    """Halves A / B of the validation split (seeded), B cut into B1 / B2, and the collection's calibration
    images (the first ``calib_batches x BATCH`` of a ``seed``-permutation of the training split)."""
    a, b = split_halves(len(data.val), seed)
    b1, b2 = (b[h] for h in split_halves(len(b), seed + 1))
    calib_ids = np.random.default_rng(seed).permutation(len(data.calib))[: calib_batches * BATCH]

    def loader(ds: Any) -> DataLoader:
        return make_loader(ds, BATCH, shuffle=False, seed=seed)

    sets = {"a": Subset(data.val, a.tolist()), "b1": Subset(data.val, b1.tolist()), "b2": Subset(data.val, b2.tolist())}
    sets["test"] = data.test
    return ImageSets(
        calib=loader(Subset(data.calib, calib_ids.tolist())),
        calib_batches=calib_batches,
        parts={k: loader(v) for k, v in sets.items()},
        counts={k: len(v) for k, v in sets.items()},
        predictor_data=dataclasses.replace(data, val=sets["a"]),
    )


def arch_key(layout: GeneLayoutBase, arch: Arch) -> str:
    """One key per distinct subnet (unused block slots do not count)."""
    return json.dumps(layout.decode(layout.canonical(layout.encode(arch))[0]).to_dict(), sort_keys=True)


class Measurer:
    """Top-1 of subnets on the image sets, each (subnet, set) measured once: JSON lines in ``path`` keyed
    by arch and supernet weights, appended as they are measured, so an interrupted run resumes."""

    def __init__(self, net: Supernet, weights: str, sets: ImageSets, path: Path) -> None:
        self.net, self.weights, self.sets, self.path = net.eval(), weights, sets, path
        self.layout = layout_of(net.space)
        self.known: dict[tuple[str, str], dict[str, Any]] = {}
        if path.is_file():
            text = path.read_text()
            for line in text.split("\n")[:-1]:  # a cut-off last line (a crash mid-write) is measured again
                rec = json.loads(line)
                if rec.get("supernet") == weights:
                    self.known[(rec["key"], rec["part"])] = rec

    def top1(self, archs: Sequence[Arch], part: str) -> np.ndarray:
        return np.array([self.known[(arch_key(self.layout, a), part)]["top1"] for a in archs])

    def cpu_seconds(self, archs: Sequence[Arch], part: str) -> float:
        """CPU seconds their measurement on ``part`` took (recalibration included)."""
        return float(sum(self.known[(arch_key(self.layout, a), part)]["cpu_s"] for a in archs))

    def measure(self, archs: Sequence[Arch], parts: Sequence[str], desc: str) -> dict[str, np.ndarray]:
        """Top-1 of every arch on every part (measuring what is not cached): part -> array in arch order."""
        todo: dict[str, Arch] = {}
        for a in archs:
            key = arch_key(self.layout, a)
            if any((key, p) not in self.known for p in parts):
                todo.setdefault(key, a)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            for key, arch in tqdm(todo.items(), desc=desc, unit="subnet", disable=not todo):
                for rec in self._measure_one(key, arch, [p for p in parts if (key, p) not in self.known]):
                    self.known[(key, rec["part"])] = rec
                    f.write(json.dumps(rec) + "\n")
                f.flush()
                os.fsync(f.fileno())
        return {p: self.top1(archs, p) for p in parts}

    def _measure_one(self, key: str, arch: Arch, parts: Sequence[str]) -> list[dict[str, Any]]:
        """BN recalibrated once, then each part evaluated; the recalibration's CPU time is shared out."""
        cpu = time.process_time()
        self.net.set_active(arch)
        recalibrate_bn(self.net, self.sets.calib, self.sets.calib_batches, resolution=arch.resolution)
        calib_cpu = (time.process_time() - cpu) / len(parts)
        out = []
        for part in parts:
            cpu = time.process_time()
            r = evaluate(self.net, self.sets.parts[part], arch.resolution)
            rec = {"supernet": self.weights, "key": key, "part": part, "top1": r["top1"], "count": r["count"]}
            out.append({**rec, "cpu_s": round(time.process_time() - cpu + calib_cpu, 4)})
        return out


# ------------------------------------------------------------------------------ latency
def latency_table(
    space: Space, recipe: Recipe, cache: Path, given: Path | None, dtype: str = "float32"
) -> tuple[Path, LatencyTable]:
    """The given table, else the one `ofa pipeline` would build on this machine for ``space`` (its backend,
    protocol and noise settings) in ``dtype``, built once and kept in ``cache`` under the space and this CPU."""
    if given is not None:
        return given, LatencyTable.load(given).for_space(space)
    cpu = hashlib.sha256(str(runtime_info("ort-cpu")["cpu"]).encode()).hexdigest()[:8]
    suffix = "" if dtype == "float32" else f"-{dtype}"  # float32 tables keep the names they always had
    path = cache / f"table-{space.fingerprint()}-ort-cpu-{cpu}{suffix}.yaml"
    if not path.is_file() or read_yaml(path, "latency table")["meta"].get("complete") is False:
        cfg = TableBuildConfig(
            out=path,
            dtype=dtype,
            protocol=Standalone(budget_s=recipe.pipeline.lut_budget_s),
            max_noise_pct=recipe.pipeline.max_noise_pct,
            command=f"python -m {'bench.search_quality' if dtype == 'float32' else 'bench.int8_search'}",
        )
        build_table(space, cfg)
    return path, LatencyTable.load(path).for_space(space)


def measured_latency(table: LatencyTable, archs: Sequence[Arch], cache: Path) -> list[float]:
    """Each subnet timed whole on the table's backend and protocol (as `ofa lut check` times), in ms;
    timings are kept in ``cache`` (JSON) by arch and this CPU."""
    path = cache / "measured_latency.json"
    known = json.loads(path.read_text()) if path.is_file() else {}
    layout, cpu = layout_of(table.space), str(runtime_info(table.meta["backend"])["cpu"])
    keys = [f"{cpu}|{arch_key(layout, a)}" for a in archs]
    todo = list({k: a for k, a in zip(keys, archs) if k not in known}.items())
    meta = table.meta
    protocol = protocol_from_dict(meta["protocol"], f"{table.source}: meta.protocol")
    for start in tqdm(range(0, len(todo), TIMED_AT_ONCE), desc="time found subnets", disable=not todo):
        block = todo[start : start + TIMED_AT_ONCE]
        runners = subnet_runners(table.space, [a for _, a in block], meta["backend"], meta["batch"], meta["threads"])
        stats = time_models(runners, protocol)
        known.update({k: stats[name]["mean_ms"] for (k, _), name in zip(block, runners)})
        write_json(path, known)
    return [float(known[k]) for k in keys]
