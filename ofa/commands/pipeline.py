"""``ofa pipeline RECIPE``: the whole chain, from recipe to verified ONNX models, resumable."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "pipeline",
        help="train → latency table → predictor → search → export, in one command",
        description="Train the supernet, reuse (or build) this machine's latency table, measure and fit the "
        "accuracy predictor, search one subnet per latency target and export each to ONNX with a "
        "parity check and a latency measurement. Rerunning continues where it stopped: stages whose "
        "outputs exist and match their inputs are skipped. Under torchrun every rank trains and "
        "measures its share of the subnets; rank 0 does the rest.",
    )
    p.add_argument("recipe", type=Path, help="recipe YAML, e.g. recipes/digits.yaml")
    p.add_argument("--out", type=Path, help="run folder (default: runs/RECIPE_NAME)")
    p.add_argument(
        "--targets-ms",
        type=float,
        nargs="+",
        metavar="MS",
        help="latency budgets (default: four spread between the smallest and largest subnet)",
    )
    p.add_argument(
        "--subnets",
        type=int,
        default=100,
        metavar="N",
        help="subnets measured for the accuracy predictor (default 100)",
    )
    p.add_argument(
        "--calib-batches",
        type=int,
        default=8,
        metavar="N",
        help="BN recalibration batches per measured subnet (default 8)",
    )
    p.add_argument("--lut", type=Path, metavar="TABLE", help="latency table to use instead of a shipped/built one")
    p.add_argument("--int8", action="store_true", help="also export INT8 models and report their accuracy")
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
        int8=args.int8,
        seed=args.seed,
    )
    run_pipeline(cfg)
    return 0
