"""Does the search pick the right subnet? Regret against the true accuracies of K random subnets, per
latency budget and search seed, and what the predictor's data costs (issue #32).

On the recipe's supernet (trained once; the PS bench's run of the same recipe is reused), K random
subnets get their true top-1 (BN recalibrated on training images) and their table latency. The rule
for images (`bench.search_quality_measure`): the validation split is halved by a fixed seed; the
predictor's data is collected on half A only, the truth on half B, which is halved again: the best of
the K that fit a budget is *chosen* on B1 and *scored* on B2, and every found subnet is scored on B2,
so neither a lucky subnet nor the predictor's own images set the bar. Per budget (the pipeline's four,
spread from the smallest to the largest subnet's table latency) and search seed: the found subnet's
true top-1, the split-half best, regret = best - found (negative values as they are), its rank among
the K that fit, its table and measured (timed whole) latency against the budget, the standard error of
one B2 measurement, and a cause where the regret misses the bar (`bench.search_quality_metrics.cause`).
Test top-1 of each found subnet is read once, beside. The front: the share of the K samples' measured
front (chosen on B1, scored on B2) that the search's own front (up to ``--front-points`` of it, scored
on B2) matches or dominates.

Learning curve: predictors fitted on the first 100, 300, 1000, 3000 subnets of one collection, each
with its held-out RMSE and Kendall tau (on the K truth subnets, against their B accuracy), its mean and
worst regret, and the collection's CPU seconds; beside them the test-retest tau of the measurement
itself (B1 vs B2 over the K). Re-rank: the search's final population (its ``--rerank`` best subnets by
predicted top-1 within the budget, the found one included) measured on half A, the most accurate kept;
its regret and CPU seconds are reported beside the plain search's.

Every measured subnet is cached (JSON lines by arch and supernet weights, ``--cache``), so an
interrupted run resumes; the predictor's data is `ofa predictor collect`'s file, resumed the same way.

    python -m bench.search_quality [--recipe fashion|digits|PATH] [--set KEY=VALUE ...] [--samples 1000]
        [--sizes 100 300 1000 3000] [--seeds 0 1 2] [--rerank 8] [--lut TABLE] [--threads N] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.common import DATA, ROOT
from bench.search_quality_measure import (
    PS_RUNS,
    ImageSets,
    Measurer,
    image_sets,
    latency_table,
    recipe_digest,
    supernet_path,
)
from bench.search_quality_report import plot_quality, print_report
from bench.search_quality_runs import Context, budget_figures, learning_point
from ofa.data.config import missing_dataset
from ofa.data.datasets import data_from_meta
from ofa.families.family import Supernet
from ofa.families.registry import load_supernet
from ofa.pipeline import TARGET_FRACTIONS
from ofa.train.recipe import load_recipe
from ofa.utils.config import apply_overrides
from ofa.utils.errors import OFAError
from ofa.utils.io import read_yaml, write_json
from search.predictor.accuracy_file import AccuracyData, load_accuracy
from search.predictor.collect import CollectConfig, collect, subnet_arch, weights_digest
from search.search_config import EvolutionConfig

RECIPES = {"digits": ROOT / "recipes" / "digits.yaml", "fashion": ROOT / "recipes" / "fashion_mnist.yaml"}
TRUTH_OFFSET = 1_000_000  # truth subnets are draws (seed, TRUTH_OFFSET + i): none is a predictor subnet's draw


@dataclass(frozen=True)
class QualityConfig:
    """What one invocation measures."""

    recipe: str = "fashion"
    overrides: tuple[str, ...] = ()
    samples: int = 1000  # K
    sizes: tuple[int, ...] = (100, 300, 1000, 3000)  # predictor data sizes; the largest is the main table's
    seeds: tuple[int, ...] = (0, 1, 2)  # search seeds
    rerank: int = 8  # final-population subnets re-ranked by measured accuracy; 0: no re-rank step
    front_points: int = 50  # most points of each search front measured
    evolution: EvolutionConfig = field(default_factory=EvolutionConfig)
    calib_batches: int | None = None  # None: the recipe's pipeline.calib_batches
    split_seed: int = 0
    lut: Path | None = None
    cache: Path = DATA / "search_quality"
    runs: Path = PS_RUNS
    png: Path | None = None  # None: bench/data/search_quality_<recipe>.png


def recipe_path(cfg: QualityConfig) -> Path:
    return RECIPES.get(cfg.recipe, Path(cfg.recipe))


def collect_predictor_data(
    net: Supernet, sets: ImageSets, folder: Path, cfg: QualityConfig
) -> tuple[AccuracyData, float]:
    """The predictor's data on half A (`collect`, grown size by size), and its CPU seconds per subnet
    (kept in ``predictor_cost.json`` beside it, so a resumed collection still knows its cost)."""
    out, cost_path = folder / "predictor_acc.jsonl", folder / "predictor_cost.json"
    cost = json.loads(cost_path.read_text()) if cost_path.is_file() else {"measured": 0, "cpu_s": 0.0}
    for n in sorted(cfg.sizes):
        cpu = time.process_time()
        done = collect(
            net,
            sets.predictor_data,
            out,
            CollectConfig(n=n, seed=cfg.split_seed, calib_batches=sets.calib_batches, repeat_split=True),
        )
        if done.measured:
            cost = {"measured": cost["measured"] + done.measured, "cpu_s": cost["cpu_s"] + time.process_time() - cpu}
            write_json(cost_path, cost)
    return load_accuracy(out), cost["cpu_s"] / max(cost["measured"], 1)


def budgets_of(ctx: Context) -> list[float]:
    """The pipeline's budgets: TARGET_FRACTIONS of the way from the smallest to the largest subnet's latency."""
    space, table = ctx.space, ctx.table
    lo = min(table.predict(space.min_arch(r)) for r in space.resolutions)
    hi = max(table.predict(space.max_arch(r)) for r in space.resolutions)
    return [float(f"{lo + f * (hi - lo):.4g}") for f in TARGET_FRACTIONS]


def prepare(cfg: QualityConfig) -> Context:
    """Supernet, image sets, table, the K truth subnets measured on B1/B2, and the predictor's data."""
    recipe = load_recipe(recipe_path(cfg), cfg.overrides)
    path = supernet_path(recipe, cfg.runs)
    net = load_supernet(path)
    data = data_from_meta(net.meta)
    weights = weights_digest(net)
    folder = cfg.cache / f"{recipe_digest(recipe)}-{weights}"
    sets = image_sets(data, cfg.split_seed, cfg.calib_batches or recipe.pipeline.calib_batches)
    table_path, table = latency_table(net.space, recipe, cfg.cache, cfg.lut)
    if table.space.resolutions != net.space.resolutions:
        raise OFAError(
            f"{table_path}: measured resolutions {list(table.space.resolutions)}; the K subnets need every one "
            f"of the supernet's {list(net.space.resolutions)}"
        )
    measurer = Measurer(net, weights, sets, folder / "measured.jsonl")
    truth = [subnet_arch(net.space, cfg.split_seed, TRUTH_OFFSET + i) for i in range(cfg.samples)]
    acc = measurer.measure(truth, ("b1", "b2"), "truth (K subnets on B1, B2)")
    predictor_data, per_subnet = collect_predictor_data(net, sets, folder, cfg)
    return Context(
        cfg=cfg,
        recipe_path=recipe_path(cfg),
        recipe_key=recipe_digest(recipe),
        supernet=path,
        space=net.space,
        table_path=table_path,
        table=table,
        measurer=measurer,
        truth=truth,
        truth_latency=np.array([table.predict(a) for a in truth]),
        truth_b1=acc["b1"],
        truth_b2=acc["b2"],
        predictor_data=predictor_data,
        collect_cpu_per_subnet=per_subnet,
    )


def run(cfg: QualityConfig) -> dict[str, Any]:
    """Everything of the module docstring; the report (also the JSON line)."""
    ctx = prepare(cfg)
    budgets = budgets_of(ctx)
    sizes = sorted(n for n in cfg.sizes if n <= len(ctx.predictor_data.top1))
    curve = [learning_point(ctx, n, budgets, main=n == sizes[-1]) for n in sizes]
    main = curve[-1]
    counts = ctx.measurer.sets.counts
    report = {
        "recipe": str(ctx.recipe_path),
        "recipe_digest": ctx.recipe_key,
        "supernet": str(ctx.supernet),
        "table": str(ctx.table_path),
        "table_noise_pct": ctx.table.noise_pct(),
        "samples": cfg.samples,
        "images": counts,
        "seeds": list(cfg.seeds),
        "budgets_ms": budgets,
        "main_size": main["size"],
        "truth_retest_tau": round(ctx.retest_tau(), 3),
        "truth_b_std": float(np.std(ctx.truth_b)),
        "truth_se": ctx.se(float(np.mean(ctx.truth_b2))),
        "budgets": budget_figures(ctx, main, budgets),
        "front": main.pop("front"),
        "learning_curve": [{k: v for k, v in p.items() if k != "rows"} for p in curve],
    }
    rows = [r for b in report["budgets"] for r in b["rows"]]
    report["all_within"] = all(r["within"] and r["within_latency"] for r in rows)
    report["regret_max"] = round(float(np.nanmax([r["regret"] for r in rows])), 2)
    late = ["measured latency over budget + 10%"] if not all(r["within_latency"] for r in rows) else []
    report["causes"] = sorted({r["cause"] for r in rows} - {"ok"}) + late
    report["png"] = str(plot_quality(ctx, report, cfg.png or DATA / f"search_quality_{ctx.recipe_path.stem}.png"))
    return report


def parse_args(argv: list[str] | None) -> tuple[QualityConfig, bool, int | None]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", default="fashion", help="fashion, digits, or a recipe path")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a recipe value")
    p.add_argument("--samples", type=int, default=1000, help="K: random subnets measured for the truth")
    p.add_argument("--sizes", type=int, nargs="+", default=[100, 300, 1000, 3000], help="predictor data sizes")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="search seeds")
    p.add_argument("--rerank", type=int, default=8, help="final-population subnets re-ranked by measured top-1")
    p.add_argument("--front-points", type=int, default=50, help="most points of each search front measured")
    p.add_argument("--population", type=int, default=EvolutionConfig.population, help="search population")
    p.add_argument("--generations", type=int, default=EvolutionConfig.generations, help="search generations")
    p.add_argument("--calib-batches", type=int, help="BN recalibration batches (default: pipeline.calib_batches)")
    p.add_argument("--lut", type=Path, help="latency table (default: built on this machine as the pipeline does)")
    p.add_argument("--cache", type=Path, default=DATA / "search_quality", help="measured subnets and the table")
    p.add_argument("--runs", type=Path, default=PS_RUNS, help="supernet runs (the PS bench's)")
    p.add_argument("--png", type=Path, help="the plot (default: bench/data/search_quality_RECIPE.png)")
    p.add_argument("--threads", type=int, help="torch threads")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    a = p.parse_args(argv)
    if min(a.samples, *a.sizes, a.front_points) < 10 or a.rerank < 0 or not a.seeds:
        p.error("need --samples, --sizes and --front-points >= 10, --rerank >= 0 and one seed at least")
    return (
        QualityConfig(
            recipe=a.recipe,
            overrides=tuple(a.set),
            samples=a.samples,
            sizes=tuple(sorted(set(a.sizes))),
            seeds=tuple(a.seeds),
            rerank=a.rerank,
            front_points=a.front_points,
            evolution=EvolutionConfig(population=a.population, generations=a.generations),
            calib_batches=a.calib_batches,
            lut=a.lut,
            cache=a.cache,
            runs=a.runs,
            png=a.png,
        ),
        a.json,
        a.threads,
    )


def main(argv: list[str] | None = None) -> int:
    try:
        cfg, as_json, threads = parse_args(argv)
        if threads:
            torch.set_num_threads(threads)
        path = recipe_path(cfg)
        raw = apply_overrides(dict(read_yaml(path, "recipe")), cfg.overrides, str(path))
        why = missing_dataset(raw.get("data") or {})
        if why:
            print(f"search_quality: skipped: {why}")
            if as_json:
                print(json.dumps({"recipe": cfg.recipe, "skipped": why}))
            return 0
        report = run(cfg)
    except OFAError as exc:
        print(f"search_quality: error: {exc}", file=sys.stderr)
        return 2
    print_report(report)
    if as_json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
