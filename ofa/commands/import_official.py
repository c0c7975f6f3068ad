"""``ofa import CHECKPOINT --out SUPERNET.pt``: an official once-for-all checkpoint → our supernet."""

from __future__ import annotations

import argparse
from typing import Any, get_type_hints

from ofa.commands._flags import add_flags, option_fields
from ofa.families.importing import import_official_file
from ofa.families.registry import family_names, get_family


def number_list(text: str) -> tuple[int | float, ...]:
    """``3,4,6`` → (3, 4, 6), ``0.2,0.25`` → (0.2, 0.25) (argparse type; the family's config says which it takes)."""
    try:
        return tuple(int(v) if v.strip().lstrip("+-").isdigit() else float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers") from None


def _options() -> dict[str, tuple[type, Any]]:
    """Each import flag's field name -> (the config that defines it, its default): the families' configs
    in registry order, a flag taken from the first that has it."""
    out: dict[str, tuple[type, Any]] = {}
    for name in family_names():
        cls = get_family(name).import_config
        for f in option_fields(cls):
            out.setdefault(f.name, (cls, f.default))
    return out


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "import",
        help=f"import an official once-for-all checkpoint (mit-han-lab/once-for-all; {', '.join(family_names())}) "
        "as a supernet",
        description="Reads an official checkpoint (e.g. ofa_mbv3_d234_e346_k357_w1.0; fp32 or fp16, old or new key "
        "names), recognises its family from the tensors, infers the space from their shapes, and writes a "
        "supernet file whose every subnet computes what the official network computes. The file carries the "
        "official preprocessing (ImageNet mean/std, bilinear resize, 0.875 centre crop). Recalibrate BN per "
        "subnet before deploying (ofa export does, given training images).",
    )
    p.add_argument("checkpoint", help="official checkpoint (.pth), as torch.save({'state_dict': ...}) wrote it")
    p.add_argument("--out", required=True, metavar="SUPERNET.pt", help="supernet file to write")
    options = _options()
    for cls in dict.fromkeys(cls for cls, _ in options.values()):
        lists = {f.name: {"type": number_list, "nargs": None} for f in option_fields(cls) if _is_tuple(cls, f.name)}
        add_flags(p, cls, lists, skip=[k for k, (owner, _) in options.items() if owner is not cls])
    p.set_defaults(func=run)


def _is_tuple(cls: type, name: str) -> bool:
    return any(f"tuple[{t}, ...]" in str(get_type_hints(cls)[name]) for t in ("int", "float"))


def run(args: argparse.Namespace) -> int:
    options = _options()
    given = {k: getattr(args, k) for k in options}
    given = {k: tuple(v) if isinstance(v, list) else v for k, v in given.items()}
    changed = {k: v for k, v in given.items() if v != options[k][1]}  # what the user set
    result = import_official_file(args.checkpoint, args.out, changed)
    space = result.space
    dims = ", ".join(f"{dim} {list(c)}" for dim, c in space.elastic_dims().items() if dim != "resolutions")
    print(
        f"wrote {result.out}: {result.tensors} tensors; {result.family.name}: {dims}, "
        f"{space.in_channels} input channels, {space.num_classes} classes, "
        f"{space.count():.1e} subnets per resolution"
    )
    return 0
