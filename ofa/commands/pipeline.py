"""``ofa pipeline RECIPE``: the whole chain, from recipe to verified ONNX models, resumable."""

from __future__ import annotations

import argparse
from dataclasses import fields
from pathlib import Path

from ofa.commands._flags import add_flags, flag_values
from ofa.pipeline import PipelineConfig, run_pipeline
from ofa.train.recipe import PipelineSettings


def register(subparsers: argparse._SubParsersAction) -> None:
    keys = ", ".join(f.name for f in fields(PipelineSettings))
    p = subparsers.add_parser(
        "pipeline",
        help="train → latency table → predictor → search → export, in one command",
        description="Train the supernet, build this machine's latency table, measure and fit the "
        "accuracy predictor, search one subnet per latency target and export each to ONNX with a "
        "parity check and a latency measurement. Rerunning continues where it stopped: stages whose "
        "outputs exist and match their inputs are skipped. Under torchrun every rank trains and "
        "measures its share of the subnets; rank 0 does the rest. Each setting below defaults to the "
        f"recipe's pipeline: section (keys: {keys}; --set pipeline.KEY=VALUE sets one there), else to the "
        "default shown.",
    )
    p.add_argument("recipe", type=Path, help="recipe YAML, e.g. recipes/digits.yaml")
    add_flags(p, PipelineConfig)
    p.set_defaults(func=run)


def config(args: argparse.Namespace) -> PipelineConfig:
    """The pipeline's config from its parsed options."""
    return PipelineConfig(recipe=args.recipe, **flag_values(PipelineConfig, args))


def run(args: argparse.Namespace) -> int:
    run_pipeline(config(args))
    return 0
