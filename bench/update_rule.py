"""Which SGD rule the ResNet recipes train with, chosen on validation: the paper's (``optimizer.update: all``) or
the one that updates only what each step used (``used``, `ofa.train.used_sgd`).

The two differ only where a step's subnets leave part of a weight unused: without the sandwich rule, as in
`recipes/imagenet_resnet50.yaml` (2 to 4 random subnets a step). There the paper's rule keeps moving the
unused channels with their momentum and weight decay; ``used`` leaves them as they are, and its step costs
less (`elastic_overhead_resnet_used` beside `elastic_overhead_resnet`). A proxy of that recipe small enough
for this machine: `recipes/digits_resnet.yaml`'s space and schedule on Fashion-MNIST (``DATA_SECTION``: 4,000
training and 5,000 validation images at 16 px), without the sandwich rule and with the ImageNet recipe's
subnets per step. Each rule is trained with ``--seeds``, each seed drawing its own validation partition, and
judged on validation only: the largest and the smallest subnet's top-1 at the end and the mean of
`bench.digits_schedule`'s random subnets'. ``used`` is adopted where each of its seed means is at least the
paper rule's less one binomial standard error (on the validation images): it must not train worse to be
worth its cheaper step. The test split is never read.

    python -m bench.update_rule [--rules all used] [--seeds 0 1 2] [--threads 1] [--json]

Each finished run's figures are kept in ``bench/data/update_rule/runs.jsonl`` (its weights in
``runs/bench/update_rule/``), so a rerun trains only what is missing; two processes with disjoint
``--seeds`` fill the two cores.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from typing import Any

import torch
import yaml

from bench.common import DATA, ROOT, fill_record, read_record
from bench.digits_schedule import final_validation, se_bar, seed_means, validation_text
from ofa.data.datasets import build_data
from ofa.train.loop import train
from ofa.train.recipe import load_recipe

BASE = ROOT / "recipes" / "digits_resnet.yaml"
RECORD = DATA / "update_rule" / "runs.jsonl"
WORK = ROOT / "runs" / "bench" / "update_rule"
RULES = ("all", "used")
SEEDS = [0, 1, 2]
DATA_SECTION = {  # recipes/fashion_mnist.yaml's data, on fewer training images (the runs fit this machine's cores)
    "name": "fashion_mnist",
    "image_size": 16,
    "train_subset": 4000,
    "val_size": 5000,
    "batch_size": 64,
    "eval_batch_size": 500,
    "augment": "none",
    "seed": 0,
}
SUBNETS_PER_STEP = {"depth_1": 2, "depth_2": 2, "expand_1": 4, "expand_2": 4, "width": 4}  # imagenet_resnet50's


def proxy_recipe(rule: str, seed: int) -> dict[str, Any]:
    """The base recipe on ``DATA_SECTION`` (this seed's validation partition), without the sandwich rule, with
    ``optimizer.update: rule``."""
    base = yaml.safe_load(BASE.read_text())
    phases = []
    for phase in base["phases"]:
        phase = {k: v for k, v in phase.items() if k != "sandwich"}
        if phase["name"] in SUBNETS_PER_STEP:
            phase["subnets_per_step"] = SUBNETS_PER_STEP[phase["name"]]
        phases.append(phase)
    data = {**DATA_SECTION, "val_seed": seed}
    return {**base, "seed": seed, "data": data, "optimizer": {**base["optimizer"], "update": rule}, "phases": phases}


def run_one(rule: str, seed: int) -> dict[str, Any]:
    out = WORK / f"{rule}_s{seed}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    recipe_path = out / "proxy.yaml"
    recipe_path.write_text(yaml.safe_dump(proxy_recipe(rule, seed), sort_keys=False))
    train(load_recipe(recipe_path), out / "run")
    return {"rule": rule, "seed": seed, **final_validation(out / "run")}


def summarize(rows: list[dict[str, Any]], seeds: list[int], val_images: int) -> dict[str, Any]:
    """Per rule the seeds' mean validation figures; whether ``used`` reaches the paper rule's bar."""
    table = {}
    for rule in RULES:
        done = [r for r in rows if r["rule"] == rule and r["seed"] in seeds]
        if len(done) == len(seeds):
            table[rule] = seed_means(done)
    result: dict[str, Any] = {"seeds": seeds, "val_images": val_images, "by_rule": table}
    if len(table) == len(RULES):
        bar = {k: round(b, 2) for k, b in se_bar(table["all"], val_images).items()}
        result["bar"] = bar
        result["used_passes"] = all(table["used"][f"val_{k}"] >= b for k, b in bar.items())
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", nargs="+", choices=RULES, default=list(RULES), help="train only these rules")
    parser.add_argument("--seeds", nargs="+", type=int, default=SEEDS)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--json", action="store_true", help="print only the JSON summary line")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    wanted = [{"rule": rule, "seed": seed} for seed in args.seeds for rule in args.rules]
    fill_record(RECORD, wanted, lambda key: run_one(key["rule"], key["seed"]))
    val_images = len(build_data(load_recipe(BASE, [f"data={json.dumps(DATA_SECTION)}"]).data).val)
    summary = summarize(read_record(RECORD), args.seeds, val_images)
    if not args.json:
        for rule, t in summary["by_rule"].items():
            print(f"update: {rule}: {t['train_seconds']} s; {validation_text(t)}")
        if "bar" in summary:
            verdict = "passes" if summary["used_passes"] else "fails"
            print(f"bar on {val_images} validation images: {summary['bar']}; update: used {verdict}")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
