"""The demo's BN calibration, chosen on validation: which training images re-estimate a subnet's statistics.

Every evaluated or exported subnet of a supernet has its BatchNorm statistics re-estimated on training batches
first (the official code does it on training images as training augments them). On digits the light augmentation
rotates, shifts and scales each image and fills the corners with zeros: statistics of images the model never sees
at inference. Each candidate is a (``data.calib_augment``, ``eval.calib_batches``) pair; each is applied to the
supernets `bench.digits_schedule` trained for the recipe's schedule (its ``SEEDS``, each with its own
train/validation partition), and judged as that bench judges schedules: the validation top-1 of the largest, the
smallest and its seeded random subnets, averaged over the seeds. The chosen pair is the best mean of the three;
a tie keeps the earlier candidate (the official code's way first, then fewer batches). The test split is never
read.

    python -m bench.digits_calibration [--seeds 0 1 2 3] [--json]

Supernets missing from ``runs/bench/digits_schedule/`` are trained as `bench.digits_schedule` trains them.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

import yaml

from bench import digits_schedule
from bench.ps_runs import evaluate_supernet
from ofa.data.datasets import build_data
from ofa.train.recipe import Recipe, load_recipe

BATCHES = (5, 10, None)  # None: every training batch


def candidates(train_batches: int) -> dict[str, dict[str, Any]]:
    """Recipe overrides per candidate, named ``augmented_N`` / ``plain_N`` (N batches; ``all``: every one)."""
    named = {}
    for augment in (True, False):
        for batches in BATCHES:
            label = f"{'augmented' if augment else 'plain'}_{batches or 'all'}"
            named[label] = {"data.calib_augment": augment, "eval.calib_batches": batches or train_batches}
    return named


def schedule_name(base: dict[str, Any]) -> str:
    """The `bench.digits_schedule` candidate that trains the recipe's own schedule and teacher."""
    wanted = {"phases": base["phases"], "distill": base["distill"]}
    for name, keys in digits_schedule.candidates().items():
        if keys == wanted:
            return name
    raise SystemExit("digits_calibration: error: recipes/digits.yaml's schedule is none of bench.digits_schedule's")


def subnets(recipe: Recipe) -> dict[str, Any]:
    """The largest, the smallest and `bench.digits_schedule`'s seeded random subnets."""
    space = recipe.space
    return {"largest": space.max_arch(), "smallest": space.min_arch(), **digits_schedule.random_subnets(space)}


def seed_figures(name: str, seed: int, base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, float]:
    """One seed's validation figures under one calibration (the supernet trained first where it is missing)."""
    run = digits_schedule.WORK / f"{name}_s{seed}"
    if not (run / "run" / "supernet.pt").is_file():
        digits_schedule.run_one(name, digits_schedule.candidates()[name], seed, base)
    recipe = load_recipe(run / "candidate.yaml", [f"{k}={json.dumps(v)}" for k, v in overrides.items()])
    top1 = evaluate_supernet(
        run / "run" / "supernet.pt", recipe, subnets(recipe), build_data(recipe.data), splits=("val",)
    )["val_top1"]
    randoms = [v for k, v in top1.items() if k.startswith("random_")]
    return {"val_largest": top1["largest"], "val_smallest": top1["smallest"], "val_random": sum(randoms) / len(randoms)}


def judge(per_seed: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Each candidate's seed means and their mean; the chosen candidate (the first of the best)."""
    table = {
        label: {k: round(sum(r[k] for r in rows) / len(rows), 2) for k in rows[0]} for label, rows in per_seed.items()
    }
    for row in table.values():
        row["val_mean"] = round(sum(row.values()) / len(row), 2)
    return {"candidates": table, "chosen": max(table, key=lambda label: table[label]["val_mean"])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=digits_schedule.SEEDS)
    parser.add_argument("--json", action="store_true", help="print only the JSON summary line")
    args = parser.parse_args()
    base = yaml.safe_load(digits_schedule.BASE.read_text())
    name = schedule_name(base)
    recipe = load_recipe(digits_schedule.BASE)
    train_batches = math.ceil(len(build_data(recipe.data).train) / recipe.data.batch_size)
    named = candidates(train_batches)
    per_seed = {
        label: [seed_figures(name, seed, base, overrides) for seed in args.seeds] for label, overrides in named.items()
    }
    summary = {"schedule": name, "seeds": args.seeds, "train_batches": train_batches, **judge(per_seed)}
    summary["chosen_settings"] = named[summary["chosen"]]
    if not args.json:
        for label, row in summary["candidates"].items():
            print(f"{label}: {row}")
        print(f"chosen: {summary['chosen']} ({summary['chosen_settings']})")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
