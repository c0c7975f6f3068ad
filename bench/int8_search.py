"""The model that ships is INT8: a float32 search then quantized, against the INT8 search (issue #33).

On the recipe's supernet (the PS bench's run of it reused, as `bench.search_quality` does), one
predictor collection measures every subnet's validation top-1 in float32 and after post-training
quantization with export's scheme (`ofa predictor collect --dtype int8`). A float32 predictor is fitted
on the first figure, an INT8 one on the second (`--target auto`: the INT8 top-1 or its drop from
float32, whichever has the lower early-stop error). Two ONNX Runtime tables of the space are built on
this machine, float32 and INT8, the INT8 one judged as `ofa lut check --dtype int8` judges it (share of
whole INT8 subnets within ±10%, Spearman). For each budget (``--fractions`` of the way from the
smallest to the largest subnet's INT8 table latency):

- the float32 search (float32 table and predictor, the budget read as float32 milliseconds: what today's
  tools ship) picks a subnet, which is then quantized;
- the INT8 search (INT8 table and predictor) picks one;

both are exported as `ofa export --int8` ships them, scored in INT8 on the same test images (paired: the
difference of per-image correctness and its standard error; the test split is read only here) and
timed whole in INT8 on this machine. Run it on quiet cores: the tables and the timings are wall-clock.

    python -m bench.int8_search [--recipe fashion|digits|PATH] [--set KEY=VALUE ...] [--subnets 300]
        [--check 50] [--fractions 0.25 0.5 0.75] [--seed 0] [--cache DIR] [--runs DIR] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench import ps_vs_scratch as ps
from bench.common import DATA
from bench.int8_search_report import render
from bench.search_quality_measure import PS_RUNS, arch_key, latency_table, supernet_path
from ofa.data.datasets import DataBundle, data_from_meta
from ofa.data.loaders import make_loader
from ofa.export.export import ExportConfig, export_subnet
from ofa.export.int8_accuracy import int8_top1
from ofa.export.verify import resized_batches
from ofa.families.family import Arch, Supernet
from ofa.families.registry import layout_of, load_supernet
from ofa.lut.check import CheckConfig, check_table
from ofa.runtime.runtimes import OrtModel
from ofa.train import load_recipe
from ofa.utils.errors import OFAError
from ofa.utils.io import write_json
from search.find import search_device
from search.latency import LatencyTable
from search.predictor.accuracy_file import load_accuracy
from search.predictor.collect import CollectConfig, collect
from search.predictor.fit import FitConfig, fit_predictor
from search.predictor.model import AccuracyPredictor
from search.search_config import SearchConfig

DEFAULT_CACHE = DATA / "int8_search"  # kept (and committed) so a later session resumes the collection
SHARED_TABLES = DATA / "search_quality"  # the float32 table is the search-quality bench's: one build, one truth


@dataclass(frozen=True)
class Int8SearchConfig:
    recipe: str = "fashion"
    overrides: tuple[str, ...] = ()
    subnets: int = 300  # the predictor's collection (float32 and INT8 top-1 of each)
    calib_batches: int = 20  # BN recalibration batches per subnet in the collection
    check: int = 50  # whole INT8 subnets per resolution judging the INT8 table
    fractions: tuple[float, ...] = (0.25, 0.5, 0.75)
    seed: int = 0
    cache: Path = DEFAULT_CACHE
    tables: Path = SHARED_TABLES  # where both tables are built once and kept, by space and CPU
    runs: Path = PS_RUNS  # where the supernet is found (or trained): the PS bench's runs


@dataclass
class Setup:
    net: Supernet
    data: DataBundle
    supernet: Path
    folder: Path
    tables: dict[str, tuple[Path, LatencyTable]]  # by dtype


def prepare(cfg: Int8SearchConfig) -> Setup:
    """The supernet, its data, a folder for this supernet's figures, and both tables built on this machine."""
    recipe = load_recipe(ps.RECIPES.get(cfg.recipe, Path(cfg.recipe)), list(cfg.overrides))
    path = supernet_path(recipe, cfg.runs, cfg.cache / "supernets")
    net = load_supernet(path)
    folder = cfg.cache / path.parent.name
    folder.mkdir(parents=True, exist_ok=True)
    tables = {dtype: latency_table(net.space, recipe, cfg.tables, None, dtype) for dtype in ("float32", "int8")}
    return Setup(net, data_from_meta(net.meta), path, folder, tables)


def predictors(s: Setup, cfg: Int8SearchConfig) -> tuple[dict[str, AccuracyPredictor], dict[str, Any]]:
    """The float32 and the INT8 predictor, both fitted on one INT8 collection (resumed where it stopped)."""
    acc = s.folder / f"acc-int8-{cfg.seed}.jsonl"
    collect_cfg = CollectConfig(
        n=cfg.subnets,
        seed=cfg.seed,
        calib_batches=cfg.calib_batches,
        repeat_split=True,
        dtype="int8",
        supernet=str(s.supernet),
    )
    collect(s.net, s.data, acc, collect_cfg, None, int8_top1)
    data = load_accuracy(acc)
    as_float = dataclasses.replace(data, top1_int8=None, header={**data.header, "dtype": "float32"})
    fit_cfg = FitConfig(seed=cfg.seed)
    fits = {"float32": fit_predictor(as_float, fit_cfg), "int8": fit_predictor(data, fit_cfg)}
    drop = data.top1_int8 - data.top1
    figures = {
        "subnets": len(data.top1),
        "int8_drop_mean": float(np.mean(drop)),
        "int8_drop_worst": float(np.min(drop)),
        "fits": {d: {k: getattr(f.report, k) for k in ("rmse", "tau", "stop_rmse")} for d, f in fits.items()},
        "int8_target": fits["int8"].report.target,
    }
    return {d: f.predictor for d, f in fits.items()}, figures


def budgets(table: LatencyTable, fractions: tuple[float, ...]) -> list[float]:
    """Budgets ``fractions`` of the way from the smallest to the largest subnet's latency on ``table``."""
    space = table.space
    lo = min(table.predict(space.min_arch(r)) for r in space.resolutions)
    hi = max(table.predict(space.max_arch(r)) for r in space.resolutions)
    return [float(f"{lo + f * (hi - lo):.4g}") for f in fractions]


def picks(s: Setup, found: dict[str, AccuracyPredictor], targets: list[float], seed: int) -> dict[str, list[Arch]]:
    """Each search's subnet per budget: the float32 one on the float32 table, the INT8 one on the INT8 table."""
    out = {}
    for dtype, predictor in found.items():
        cfg = SearchConfig(tuple(targets), seed=seed, dtype=dtype)
        result, _ = search_device(s.net.space, predictor, s.tables[dtype][1], cfg)
        out[dtype] = [t.arch for t in result.targets]
    return out


def correct_on_test(onnx_path: Path, data: DataBundle, resolution: int) -> np.ndarray:
    """Per test image, whether the ONNX model's top-1 class is the label (in the test split's order)."""
    runner = OrtModel(onnx_path)
    loader = make_loader(data.test, 256, shuffle=False, seed=0)
    return np.concatenate([runner(x.numpy()).argmax(1) == y.numpy() for x, y in resized_batches(loader, resolution)])


def ship(s: Setup, arch: Arch, name: str, seed: int) -> tuple[dict[str, Any], np.ndarray]:
    """``arch`` exported in INT8 as `ofa export --int8` ships it (timed against the INT8 table), its figures
    and per-image correctness on the test split."""
    out = s.folder / "exports" / f"{name}.onnx"
    cfg = ExportConfig(out=out, int8=True, seed=seed, checkpoint=s.supernet, progress=False)
    result = export_subnet(s.net, arch, cfg, data=s.data, table=s.tables["int8"][1])
    correct = correct_on_test(result.int8_path, s.data, arch.resolution)
    latency = result.latency_int8
    row = {
        "arch": arch.short(),
        "predicted_int8_ms": result.predicted_latency_ms,
        "measured_int8_ms": latency.mean_ms if latency is not None else None,
        "top1_int8": result.top1_int8,
        "top1_fp32": result.top1_fp32,
        "test_images": len(correct),
    }
    return row, correct


def paired(base: np.ndarray, other: np.ndarray) -> dict[str, float]:
    """Top-1 points of ``other`` over ``base`` on the same images, with the standard error of that difference."""
    diff = other.astype(float) - base.astype(float)
    se = float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else float("nan")
    return {"delta_top1": 100 * float(diff.mean()), "delta_se": 100 * se, "images_differing": int((diff != 0).sum())}


def budget_row(s: Setup, budget: float, archs: dict[str, Arch], seed: int) -> dict[str, Any]:
    """Both picks under one budget, shipped and compared (paired); one export when both picked the same subnet."""
    layout = layout_of(s.net.space)
    same = arch_key(layout, archs["float32"]) == arch_key(layout, archs["int8"])  # unused slots do not count
    shipped = {d: ship(s, a, f"{d}_{budget:g}ms", seed) for d, a in archs.items() if not (same and d == "int8")}
    if same:
        shipped["int8"] = shipped["float32"]
    row = {"budget_ms": budget, "same_subnet": same, **{d: r for d, (r, _) in shipped.items()}}
    row.update(paired(shipped["float32"][1], shipped["int8"][1]))
    for d in archs:
        measured = row[d]["measured_int8_ms"]
        row[d]["within_budget"] = measured is not None and measured <= budget
    return row


def int8_table_check(s: Setup, n: int, seed: int) -> dict[str, Any]:
    """The INT8 table judged on ``n`` whole INT8 subnets per resolution, as `ofa lut check` judges it."""
    result = check_table(s.tables["int8"][1], CheckConfig(n=n, seed=seed, progress=False, dtype="int8"))
    keep = ("n", "within_10pct", "spearman", "mape")
    return {
        "all": {k: result.summary.get(k) for k in keep},
        "per_resolution": {str(r): {k: v.get(k) for k in keep} for r, v in result.summary["per_resolution"].items()},
    }


def run(cfg: Int8SearchConfig) -> dict[str, Any]:
    """Everything of the module docstring; the report (also written as ``report.json`` in the cache)."""
    s = prepare(cfg)
    found, fit_figures = predictors(s, cfg)
    targets = budgets(s.tables["int8"][1], cfg.fractions)
    chosen = picks(s, found, targets, cfg.seed)
    rows = [budget_row(s, b, {d: chosen[d][i] for d in chosen}, cfg.seed) for i, b in enumerate(targets)]
    report = {
        "recipe": cfg.recipe,
        "supernet": s.supernet.parent.name,
        "tables": {d: str(p) for d, (p, _) in s.tables.items()},
        "int8_table_check": int8_table_check(s, cfg.check, cfg.seed),
        "predictors": fit_figures,
        "budgets": rows,
        "int8_pick_at_least_as_accurate": sum(r["delta_top1"] >= 0 for r in rows),
        "int8_pick_worse_beyond_2se": sum(r["delta_top1"] < -2 * r["delta_se"] for r in rows),
    }
    write_json(s.folder / "report.json", report)
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", default="fashion", help="digits, fashion, or a recipe path")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a recipe value")
    p.add_argument("--subnets", type=int, default=Int8SearchConfig.subnets, help="subnets the predictors learn from")
    p.add_argument("--calib-batches", type=int, default=Int8SearchConfig.calib_batches)
    p.add_argument("--check", type=int, default=Int8SearchConfig.check, help="INT8 subnets per resolution checked")
    p.add_argument("--fractions", type=float, nargs="+", default=list(Int8SearchConfig.fractions))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="the collection, exports and report")
    p.add_argument("--tables", type=Path, default=SHARED_TABLES, help="the float32 and INT8 tables")
    p.add_argument("--runs", type=Path, default=PS_RUNS, help="where the supernet is found, else trained")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    a = p.parse_args(argv)
    if any(not 0 < f < 1 for f in a.fractions) or a.subnets < 10 or a.check < 2:
        p.error("--fractions within (0, 1), --subnets >= 10, --check >= 2")
    cfg = Int8SearchConfig(
        a.recipe,
        tuple(a.set),
        a.subnets,
        a.calib_batches,
        a.check,
        tuple(a.fractions),
        a.seed,
        a.cache,
        a.tables,
        a.runs,
    )
    why = ps.missing_data(ps.RECIPES.get(cfg.recipe, Path(cfg.recipe)), cfg.overrides)
    if why:
        print(f"int8_search: skipped: {why}")
        if a.json:
            print(json.dumps({"skipped": why}))
        return 0
    try:
        report = run(cfg)
    except OFAError as exc:
        print(f"int8_search: error: {exc}", file=sys.stderr)
        return 2
    print(render(report))
    if a.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
