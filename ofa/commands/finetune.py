"""``ofa finetune RECIPE --supernet S --arch A --out DIR``: train one subnet as an ordinary timm model."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "finetune",
        help="fine-tune one subnet of a supernet as an ordinary model (resumable)",
        description="Extracts subnet ARCH (our arch JSON or an official {ks, e, d, r} config) from the supernet and "
        "trains it on the recipe's data (epochs, lr, warmup_epochs, lr_schedule, optimizer, data, "
        "distill: {teacher: none|supernet}, checkpoint, logging). Writes DIR/subnet.pt (for ofa.load_subnet), "
        "metrics.jsonl, tensorboard/ (as training does), recipe.yaml and checkpoints/; --resume continues a "
        "killed run to the same bits.",
    )
    p.add_argument("recipe", help="fine-tuning recipe YAML, e.g. recipes/finetune_digits.yaml")
    p.add_argument("--supernet", required=True, metavar="S.pt", help="supernet file (ofa import / ofa train)")
    p.add_argument("--arch", required=True, metavar="ARCH.json", help="subnet to fine-tune")
    p.add_argument("--out", required=True, metavar="DIR", help="run folder")
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in DIR")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a recipe value, e.g. --set epochs=2",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ofa.train.finetune import finetune_files

    r = finetune_files(args.supernet, args.arch, args.recipe, args.out, args.resume, args.overrides)
    print(
        f"fine-tuned {r.arch.short()} for {r.epochs} epochs: val top-1 {r.val_top1:.2f}%, test top-1 "
        f"{r.test_top1:.2f}%; wrote {r.subnet_path}"
    )
    return 0
