"""``ofa predictor collect|fit``: measure random subnets of a supernet, fit the accuracy predictor on them."""

from __future__ import annotations

import argparse


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
    c.add_argument(
        "--n",
        "--subnets",
        dest="n",
        type=int,
        default=1000,
        help="number of subnets (default 1000; spell it --subnets after torchrun, whose own parser "
        "takes --n for one of its flags)",
    )
    c.add_argument("--out", metavar="ACC.jsonl", help="output (default: acc.jsonl next to CKPT)")
    c.add_argument("--seed", type=int, default=0, help="seed of the subnets, calibration images and halves")
    c.add_argument("--calib-batches", type=int, default=20, metavar="N", help="BN recalibration batches (20)")
    c.add_argument("--batch-size", type=int, default=100, metavar="B", help="images per batch (100)")
    c.add_argument(
        "--repeat-split",
        action="store_true",
        help="also measure each subnet on two disjoint halves of the validation split (test-retest)",
    )
    c.add_argument("--device", default="auto", help="cpu, cuda, cuda:N (default: this rank's GPU if any, else cpu)")
    c.add_argument("--workers", type=int, default=0, help="data-loader worker processes (0)")
    c.set_defaults(func=run_collect)


def _add_fit(sub: argparse._SubParsersAction) -> None:
    f = sub.add_parser(
        "fit",
        help="fit the accuracy predictor on collected accuracies",
        description="Fit an MLP on the arch encoding (one-hot kernel/expand per block slot, zeros for skipped "
        "slots, one-hot resolution) with Adam. The subnets are split three ways: 65% to fit, 15% to "
        "stop early on, and 20% for the reported RMSE and Kendall tau only (and the test-retest tau of "
        "the two validation halves on those same subnets when collected with --repeat-split).",
    )
    f.add_argument("accuracy", metavar="ACC.jsonl", help="output of `ofa predictor collect`")
    f.add_argument("--out", metavar="PREDICTOR.pt", help="output (default: predictor.pt next to ACC.jsonl)")
    f.add_argument("--seed", type=int, default=0, help="seed of the splits, init and batch order")
    f.add_argument(
        "--test-fraction",
        "--holdout",
        dest="test_fraction",
        type=float,
        default=0.2,
        help="share of subnets kept for the reported figures only (0.2)",
    )
    f.add_argument(
        "--stop-fraction", type=float, default=0.15, help="share of subnets that decides early stopping (0.15)"
    )
    f.add_argument("--hidden", type=int, default=400, help="hidden width (400, as OFA)")
    f.add_argument("--layers", type=int, default=3, help="hidden layers (3, as OFA)")
    f.add_argument("--epochs", type=int, default=1000, help="most epochs (1000)")
    f.add_argument("--patience", type=int, default=50, help="epochs without early-stop improvement (50)")
    f.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (1e-3)")
    f.add_argument("--weight-decay", type=float, default=0.0, help="Adam weight decay (0)")
    f.add_argument("--batch-size", type=int, default=256, help="subnets per step (256)")
    f.set_defaults(func=run_fit)


def run_collect(args: argparse.Namespace) -> int:
    from search.predictor.collect import CollectConfig, collect_from_checkpoint

    cfg = CollectConfig(
        n=args.n,
        seed=args.seed,
        calib_batches=args.calib_batches,
        batch_size=args.batch_size,
        repeat_split=args.repeat_split,
        num_workers=args.workers,
    )
    result = collect_from_checkpoint(args.checkpoint, cfg, args.out, args.device)
    if result.rank == 0:
        print(
            f"measured {result.measured} subnet(s) on rank 0 of {result.world_size}; {result.out} holds "
            f"{result.total} subnet(s)"
        )
    return 0


def run_fit(args: argparse.Namespace) -> int:
    from search.predictor.fit import FitConfig, fit_predictor_file

    cfg = FitConfig(
        test_fraction=args.test_fraction,
        stop_fraction=args.stop_fraction,
        seed=args.seed,
        hidden=args.hidden,
        layers=args.layers,
        lr=args.lr,
        weight_decay=args.weight_decay,
        batch_size=args.batch_size,
        max_epochs=args.epochs,
        patience=args.patience,
    )
    result, out = fit_predictor_file(args.accuracy, args.out, cfg)
    report, stem = result.report, out.with_suffix("")
    print(
        f"{report.train_size + report.stop_size + report.test_size} subnets, {report.train_size} to fit, "
        f"{report.stop_size} to stop early: {report.summary()}"
    )
    print(f"wrote {out} (+ {stem.name}.fit.jsonl, {stem.name}.fit.png)")
    return 0
