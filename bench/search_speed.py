"""Search speed and quality: one search with the official OFA settings on a family's published space.

Population 100, 500 generations, a fixed randomly initialised predictor (3 x 400 MLP), the space's
latency table from latency_tables/ (a synthetic per-layer cost if none exists yet, and it says so),
budget = the 30th percentile of random subnets' latency. Prints the wall time of the whole search
(evolution + Pareto front; target <= 1 s, the official EvolutionFinder takes about 100 s), and the
found subnet's predicted accuracy against the best of 10,000 random subnets within the budget.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import torch

from bench.common import ROOT
from ofa.families.family import Space
from ofa.families.registry import layout_of
from ofa.utils.errors import OFAError
from search.dense import DenseCost
from search.evolution import run_search
from search.latency import LatencyTable, space_from_arg
from search.predictor.model import AccuracyPredictor
from search.search_config import EvolutionConfig, SearchConfig


def latency_model(preset: str = "mbv3") -> tuple[Space, object, str]:
    """(space, latency, label): the table of the ``preset`` space (``latency_tables/*<preset>*.yaml``, the
    default backend's float32 table first) and the space it was measured for (the preset, or its subset of
    resolutions), else the preset space with a synthetic cost (MACs plus a per-layer charge, more with
    squeeze-excite)."""
    why = f"no latency_tables/*{preset}*.yaml yet"
    default = f"{preset}_ort-cpu_t1_b1.yaml"
    for path in sorted((ROOT / "latency_tables").glob(f"*{preset}*.yaml"), key=lambda p: (p.name != default, p.name)):
        try:
            table = LatencyTable.load(path)
        except OFAError as exc:
            why = str(exc)
            continue
        return table.space, table, str(path.relative_to(ROOT))
    space = space_from_arg(preset)
    cost = DenseCost.from_layer_cost(
        space, lambda layer: layer.macs / 2e8 + 0.02 + 0.01 * getattr(layer, "se", False), overhead=0.3
    )
    return space, cost, f"synthetic ({why})"


def feasible_samples(space: Space, latency: object, budget: float, n: int, seed: int) -> np.ndarray:
    rng, found, total = np.random.default_rng(seed), [], 0
    while total < n:
        rows = layout_of(space).sample(4 * n, rng)
        rows = rows[np.asarray(latency.predict_batch(rows)) <= budget]
        found.append(rows)
        total += len(rows)
    return np.concatenate(found)[:n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--space", default="mbv3", help="a family's preset space (mbv3, proxyless, ofa_resnet50)")
    ap.add_argument("--latency-ms", type=float, help="budget (default: 30th percentile of random subnets)")
    ap.add_argument("--random", type=int, default=10_000, help="random feasible subnets to compare with")
    args = ap.parse_args()

    space, latency, table = latency_model(args.space)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(args.seed)
        predictor = AccuracyPredictor(space, target_mean=75.0, target_std=5.0).eval()
    rows = layout_of(space).sample(10_000, np.random.default_rng(args.seed + 1))
    budget = args.latency_ms or float(np.percentile(latency.predict_batch(rows), 30))

    warm = SearchConfig([budget], seed=args.seed + 1, evolution=EvolutionConfig(generations=3))
    run_search(space, predictor, latency, warm)
    start, cpu = time.perf_counter(), time.process_time()
    result = run_search(space, predictor, latency, SearchConfig([budget], seed=args.seed))
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    found = result.targets[0]

    pool = feasible_samples(space, latency, budget, args.random, args.seed + 2)
    best_random = float(predictor.predict_batch(pool).max())
    out = {
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu_seconds, 3),
        "evolution_seconds": round(found.seconds, 3),
        "target_seconds": 1.0,
        "space": args.space,
        "table": table,
        "latency_budget_ms": round(budget, 4),
        "found_top1": round(found.arch.extra["predicted_top1"], 4),
        "found_latency_ms": round(found.arch.extra["latency_ms"], 4),
        "random_best_top1": round(best_random, 4),
        "random_samples": len(pool),
        "at_least_as_good": found.arch.extra["predicted_top1"] >= best_random,
        "evaluated_subnets": result.evaluated,
        "pareto_size": len(result.front),
        "torch_threads": torch.get_num_threads(),
    }
    print(f"table: {table}")
    print(
        f"one search, OFA defaults (population 100, 500 generations), budget {budget:.3f} ms: "
        f"{seconds:.3f} s ({found.seconds:.3f} s evolution, the rest the Pareto front; {cpu_seconds:.3f} s of "
        "CPU time: on a busy machine the wall time is longer); target <= 1 s"
    )
    print(
        f"found: predicted top-1 {out['found_top1']:.3f} at {out['found_latency_ms']:.3f} ms; best of "
        f"{len(pool)} random subnets within budget: {best_random:.3f} -> "
        f"{'at least as good' if out['at_least_as_good'] else 'WORSE'}"
    )
    print(f"{result.evaluated} distinct subnets evaluated, Pareto front of {len(result.front)}")
    if args.json:
        print(json.dumps(out))
    sys.exit(0 if out["at_least_as_good"] else 1)


if __name__ == "__main__":
    main()
