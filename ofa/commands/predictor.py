"""``ofa predictor collect|fit``: measure random subnets of a supernet, fit the accuracy predictor on them."""

from __future__ import annotations

import argparse

from ofa.commands._flags import add_flags, flag_values
from ofa.export.int8_accuracy import int8_top1
from search.predictor.collect import CollectConfig, collect_from_checkpoint
from search.predictor.fit import FitConfig, fit_predictor_file


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "predictor",
        help="measure subnet accuracies and fit the accuracy predictor",
        description="Accuracy predictor for the search: `collect` measures random subnets of a "
        "trained supernet, `fit` trains the MLP on those measurements.",
    )
    sub = p.add_subparsers(dest="action", metavar="ACTION", parser_class=type(p))
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
    _add_collect(sub)
    _add_fit(sub)


def _add_collect(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser(
        "collect",
        help="measure N random subnets on the validation split",
        description="Evaluate N random subnets of a trained supernet on its held-out validation split (never the "
        "test split), each after BN recalibration on training images. Appends one JSON line per "
        "subnet, so rerunning the same command resumes (or extends to a larger --n). Under torchrun "
        "the subnets are shared across ranks.",
    )
    c.add_argument("checkpoint", metavar="CKPT", help="supernet file or training checkpoint")
    c.add_argument("--out", metavar="ACC.jsonl", help="output (default: acc.jsonl next to CKPT)")
    c.add_argument("--device", default="auto", help="cpu, cuda, cuda:N (default: this rank's GPU if any, else cpu)")
    add_flags(c, CollectConfig)
    c.set_defaults(func=run_collect)


def _add_fit(sub: argparse._SubParsersAction) -> None:
    test, stop = FitConfig.test_fraction, FitConfig.stop_fraction
    f = sub.add_parser(
        "fit",
        help="fit the accuracy predictor on collected accuracies",
        description="Fit an MLP on the arch encoding (one-hot kernel/expand per block slot, zeros for skipped "
        f"slots, one-hot resolution) with Adam. The subnets are split three ways: {1 - test - stop:.0%} to fit, "
        f"{stop:.0%} to stop early on, and {test:.0%} for the reported RMSE and Kendall tau only (and the "
        "test-retest tau of the two validation halves on those same subnets when collected with --repeat-split).",
    )
    f.add_argument("accuracy", metavar="ACC.jsonl", help="output of `ofa predictor collect`")
    f.add_argument("--out", metavar="PREDICTOR.pt", help="output (default: predictor.pt next to ACC.jsonl)")
    add_flags(f, FitConfig)
    f.set_defaults(func=run_fit)


def run_collect(args: argparse.Namespace) -> int:
    cfg = CollectConfig(**flag_values(CollectConfig, args))
    result = collect_from_checkpoint(args.checkpoint, cfg, args.out, args.device, int8=int8_top1)
    if result.rank == 0:
        print(
            f"measured {result.measured} subnet(s) on rank 0 of {result.world_size}; {result.out} holds "
            f"{result.total} subnet(s)"
        )
    return 0


def run_fit(args: argparse.Namespace) -> int:
    cfg = FitConfig(**flag_values(FitConfig, args))
    result, out = fit_predictor_file(args.accuracy, args.out, cfg)
    report, stem = result.report, out.with_suffix("")
    print(
        f"{report.train_size + report.stop_size + report.test_size} subnets, {report.train_size} to fit, "
        f"{report.stop_size} to stop early: {report.summary()}"
    )
    print(f"wrote {out} (+ {stem.name}.fit.jsonl, {stem.name}.fit.png)")
    return 0
