"""``ofa import CHECKPOINT --out SUPERNET.pt``: an official once-for-all OFA-MobileNetV3 checkpoint → our supernet."""

from __future__ import annotations

import argparse

from ofa.commands._flags import add_flags, flag_values
from ofa.families.mbv3.official import ImportConfig, import_official_file


def int_list(text: str) -> tuple[int, ...]:
    """``3,4,6`` → (3, 4, 6) (argparse type)."""
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "import",
        help="import an official OFA-MobileNetV3 checkpoint (mit-han-lab/once-for-all) as a supernet",
        description="Reads an official checkpoint (e.g. ofa_mbv3_d234_e346_k357_w1.0; fp32 or fp16, old or new key "
        "names), infers widths, kernel set, largest expand ratio and depth from the tensor shapes, and "
        "writes a supernet file whose every subnet computes what the official network computes. The "
        "file carries the official preprocessing (ImageNet mean/std, bilinear resize, 0.875 centre crop). "
        "Recalibrate BN per subnet before deploying (ofa export does, given training images).",
    )
    p.add_argument("checkpoint", help="official checkpoint (.pth), as torch.save({'state_dict': ...}) wrote it")
    p.add_argument("--out", required=True, metavar="SUPERNET.pt", help="supernet file to write")
    add_flags(p, ImportConfig, {key: {"type": int_list, "nargs": None} for key in ("expands", "depths")})
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = ImportConfig(**flag_values(ImportConfig, args))
    result = import_official_file(args.checkpoint, args.out, config)
    space = result.space
    print(
        f"wrote {result.out}: {result.tensors} tensors; stage widths {list(space.stage_channels)}, kernels "
        f"{list(space.kernels)}, expands {list(space.expands)}, depths {list(space.depths)}, "
        f"{space.in_channels} input channels, {space.num_classes} classes, "
        f"{space.count():.1e} subnets per resolution"
    )
    return 0
