"""``ofa train RECIPE [--out runs/NAME] [--resume] [--set key=value ...]``: progressive shrinking.

Under ``torchrun --nproc_per_node=N -m ofa train ...`` every process is one data-parallel rank.
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "train", help="train a supernet by progressive shrinking (from a YAML recipe)", description=__doc__
    )
    p.add_argument("recipe", help="recipe YAML, e.g. recipes/digits.yaml")
    p.add_argument("--out", help="run folder (default: runs/RECIPE_NAME)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from the newest checkpoint in the run folder, with the recipe it was trained with",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a recipe value, e.g. --set data.batch_size=32 --set phases.kernel.epochs=2",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ofa.train import train_file

    train_file(args.recipe, args.out, resume=args.resume, overrides=args.overrides)
    return 0
