"""``ofa pipeline RECIPE``: the whole chain, from recipe to verified ONNX models, resumable."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "pipeline",
        help="train → latency table → predictor → search → export, in one command",
        description="Train the supernet, build this machine's latency table, measure and fit the "
        "accuracy predictor, search one subnet per latency target and export each to ONNX with a "
        "parity check and a latency measurement. Rerunning continues where it stopped: stages whose "
        "outputs exist and match their inputs are skipped. Under torchrun every rank trains and "
        "measures its share of the subnets; rank 0 does the rest. Each setting below defaults to the "
        "recipe's pipeline: section (keys: subnets, calib_batches, targets_ms, lut, max_noise_pct, "
        "lut_budget_s, int8), else to the default shown.",
    )
    p.add_argument("recipe", type=Path, help="recipe YAML, e.g. recipes/digits.yaml")
    p.add_argument("--out", type=Path, help="run folder (default: runs/RECIPE_NAME)")
    p.add_argument(
        "--targets-ms",
        type=float,
        nargs="+",
        metavar="MS",
        help="latency budgets (pipeline.targets_ms; default: four spread between the smallest and largest subnet)",
    )
    p.add_argument(
        "--subnets",
        type=int,
        metavar="N",
        help="subnets measured for the accuracy predictor (pipeline.subnets; default 100)",
    )
    p.add_argument(
        "--calib-batches",
        type=int,
        metavar="N",
        help="BN recalibration batches per measured subnet (pipeline.calib_batches; default 8)",
    )
    _add_table_args(p)
    p.add_argument(
        "--int8",
        action="store_true",
        default=None,
        help="also export INT8 models and report their accuracy (pipeline.int8)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a recipe value, e.g. --set schedule.seed=1 (repeatable)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of subnet sampling, search and export")
    p.set_defaults(func=run)


def _add_table_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--lut", type=Path, metavar="TABLE", help="latency table to use instead of building one on this machine"
    )
    p.add_argument(
        "--max-noise",
        type=float,
        metavar="PCT",
        help="strict (for CI): stop when a table resolution is less sure than ±PCT (pipeline.max_noise_pct; "
        "default: warn, write it and go on)",
    )
    p.add_argument(
        "--lut-budget",
        type=float,
        metavar="S",
        help="table build: most seconds of timing per model (pipeline.lut_budget_s; default 0.5)",
    )


def run(args: argparse.Namespace) -> int:
    from ofa.pipeline import PipelineConfig, run_pipeline

    cfg = PipelineConfig(
        recipe=args.recipe,
        out=args.out,
        overrides=tuple(args.overrides),
        targets_ms=tuple(args.targets_ms) if args.targets_ms else None,
        subnets=args.subnets,
        calib_batches=args.calib_batches,
        lut=args.lut,
        max_noise_pct=args.max_noise,
        lut_budget_s=args.lut_budget,
        int8=args.int8,
        seed=args.seed,
    )
    run_pipeline(cfg)
    return 0
