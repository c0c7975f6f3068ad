"""``ofa predictor collect|fit``: measure random subnets of a supernet, fit the accuracy predictor on them."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from ofa.errors import OFAError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("predictor", help="measure subnet accuracies and fit the accuracy predictor",
                              description="Accuracy predictor for the search: `collect` measures random subnets of a "
                                          "trained supernet, `fit` trains the MLP on those measurements.")
    sub = p.add_subparsers(dest="action", metavar="ACTION", parser_class=type(p))
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])

    c = sub.add_parser(
        "collect", help="measure N random subnets on the validation split",
        description="Evaluate N random subnets of a trained supernet on its held-out validation split (never the "
                    "test split), each after BN recalibration on training images. Appends one JSON line per "
                    "subnet, so rerunning the same command resumes (or extends to a larger --n). Under torchrun "
                    "the subnets are shared across ranks.")
    c.add_argument("checkpoint", metavar="CKPT", help="supernet file or training checkpoint")
    c.add_argument("--n", "--subnets", dest="n", type=int, default=1000,
                   help="number of subnets (default 1000; spell it --subnets after torchrun, whose own parser "
                        "takes --n for one of its flags)")
    c.add_argument("--out", metavar="ACC.jsonl", help="output (default: acc.jsonl next to CKPT)")
    c.add_argument("--seed", type=int, default=0, help="seed of the subnets, calibration images and halves")
    c.add_argument("--calib-batches", type=int, default=20, metavar="N", help="BN recalibration batches (20)")
    c.add_argument("--batch-size", type=int, default=100, metavar="B", help="images per batch (100)")
    c.add_argument("--repeat-split", action="store_true",
                   help="also measure each subnet on two disjoint halves of the validation split (test-retest)")
    c.add_argument("--device", default="auto", help="cpu, cuda, cuda:N (default: this rank's GPU if any, else cpu)")
    c.add_argument("--workers", type=int, default=0, help="data-loader worker processes (0)")
    c.set_defaults(func=run_collect)

    f = sub.add_parser(
        "fit", help="fit the accuracy predictor on collected accuracies",
        description="Fit an MLP on the arch encoding (one-hot kernel/expand per block slot, zeros for skipped "
                    "slots, one-hot resolution) with Adam and early stopping on a held-out 20%; reports held-out "
                    "RMSE and Kendall tau (and the test-retest tau of the two validation halves when collected "
                    "with --repeat-split).")
    f.add_argument("accuracy", metavar="ACC.jsonl", help="output of `ofa predictor collect`")
    f.add_argument("--out", metavar="PREDICTOR.pt", help="output (default: predictor.pt next to ACC.jsonl)")
    f.add_argument("--seed", type=int, default=0, help="seed of the held-out split, init and batch order")
    f.add_argument("--holdout", type=float, default=0.2, help="held-out fraction (0.2)")
    f.add_argument("--hidden", type=int, default=400, help="hidden width (400, as OFA)")
    f.add_argument("--layers", type=int, default=3, help="hidden layers (3, as OFA)")
    f.add_argument("--epochs", type=int, default=1000, help="most epochs (1000)")
    f.add_argument("--patience", type=int, default=50, help="epochs without held-out improvement before stopping")
    f.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (1e-3)")
    f.add_argument("--weight-decay", type=float, default=0.0, help="Adam weight decay (0)")
    f.add_argument("--batch-size", type=int, default=256, help="subnets per step (256)")
    f.set_defaults(func=run_fit)


def _positive(name: str, value: float) -> None:
    if value <= 0:
        raise OFAError(f"{name} must be positive, got {value}")


def _device(arg: str, local_rank: int) -> Any:
    import torch

    if arg == "auto":
        return torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(arg)
    except RuntimeError:
        raise OFAError(f"--device: unknown device {arg!r} (cpu, cuda, cuda:N)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise OFAError("--device cuda: no CUDA device is available")
    return device


def run_collect(args: argparse.Namespace) -> int:
    import datetime

    import torch.distributed as dist

    from ofa.supernet import OFAMobileNetV3
    from search.collect import collect

    for name in ("n", "calib_batches", "batch_size"):
        _positive(f"--{name.replace('_', '-')}", getattr(args, name))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    device = _device(args.device, local_rank)
    net = OFAMobileNetV3.load(args.checkpoint)
    if not net.meta.get("data"):
        raise OFAError(f"{args.checkpoint}: records no data section, so its validation split is unknown "
                       "(train it with `ofa train`)")
    from ofa.data import data_from_meta

    data = data_from_meta(net.meta)
    if data.val is None or len(data.val) == 0:
        raise OFAError(f"{args.checkpoint}: its data has no validation split to measure subnets on")
    out = Path(args.out) if args.out else Path(args.checkpoint).parent / "acc.jsonl"
    started = False
    if world_size > 1 and not dist.is_initialized():
        if device.type == "cuda":
            import torch

            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=datetime.timedelta(hours=24))
        started = True
    try:
        measured = collect(net, data.train, data.val, out, args.n, seed=args.seed, calib_batches=args.calib_batches,
                           batch_size=args.batch_size, repeat_split=args.repeat_split, device=device, rank=rank,
                           world_size=world_size, supernet=str(args.checkpoint), num_workers=args.workers)
    finally:
        if started:
            dist.destroy_process_group()
    if rank == 0:
        from search.collect import read_accuracy

        total = len(read_accuracy(out)[1])
        print(f"measured {measured} subnet(s) on rank 0 of {world_size}; {out} holds {total} subnet(s)")
    return 0


def run_fit(args: argparse.Namespace) -> int:
    import json

    from ofa.io import write_text
    from search.collect import load_accuracy
    from search.predictor import fit_predictor, plot_fit

    for name in ("hidden", "layers", "epochs", "patience", "lr", "batch_size"):
        _positive(f"--{name.replace('_', '-')}", getattr(args, name))
    if not 0 < args.holdout < 1:
        raise OFAError(f"--holdout must be between 0 and 1, got {args.holdout}")
    data = load_accuracy(args.accuracy)
    out = Path(args.out) if args.out else Path(args.accuracy).parent / "predictor.pt"
    curve: list[dict[str, Any]] = []

    from tqdm import tqdm

    with tqdm(total=args.epochs, desc="fit", unit="epoch", file=sys.stderr) as bar:
        def on_epoch(m: dict[str, Any]) -> None:
            curve.append(m)
            bar.update()
            bar.set_postfix(heldout_rmse=f"{m['heldout_rmse']:.3f}")

        model, report, held = fit_predictor(
            data.space, data.rows, data.top1, retest=data.halves, holdout=args.holdout, seed=args.seed,
            hidden=args.hidden, layers=args.layers, lr=args.lr, weight_decay=args.weight_decay,
            batch_size=args.batch_size, max_epochs=args.epochs, patience=args.patience, on_epoch=on_epoch)
    model.metrics["source"] = str(args.accuracy)
    model.save(out)
    stem = out.with_suffix("")
    write_text(f"{stem}.fit.jsonl", "".join(json.dumps(m) + "\n" for m in curve))
    plot_fit(held, curve, report, f"{stem}.fit.png")
    print(f"{len(data.top1)} subnets, {report.train_size} to train: {report.summary()}")
    print(f"wrote {out} (+ {stem.name}.fit.jsonl, {stem.name}.fit.png)")
    return 0
