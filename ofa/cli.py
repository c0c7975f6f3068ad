"""The ``ofa`` command. Each verb lives in its own module under ``ofa.commands``.

A command module defines ``register(subparsers)``, which adds its parser(s) and sets
``func=run`` where ``run(args) -> int`` returns the exit status; a module named ``_*`` is a helper of
the verbs, not a verb. User errors (`OFAError`) print
one line and exit 2; no traceback reaches the user for bad input.

A run of one verb imports that verb's module only (`VERBS`): the verbs' libraries together import torch,
timm, scikit-learn, SciPy, ONNX and matplotlib, seconds per process that a command, a torchrun rank or
a resumed run would pay for nothing. ``ofa`` alone or ``ofa --help`` imports them all to list them.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
from collections.abc import Sequence

from ofa.utils.errors import OFAError


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line naming the command and the problem."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


# verb -> its module in ofa.commands (tests/test_flags.py checks that every module is here)
VERBS = {
    "export": "export",
    "finetune": "finetune",
    "import": "import_official",
    "lut": "lut",
    "noise-scale": "noise_scale",
    "pipeline": "pipeline",
    "predictor": "predictor",
    "push": "push",
    "search": "search",
    "train": "train",
}


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    """The parser of ``verb`` alone when it is one of `VERBS`, else of every verb."""
    parser = OneLineParser(prog="ofa", description="Once-for-all supernet toolkit: train, search, export.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for name in [VERBS[verb]] if verb in VERBS else sorted(VERBS.values()):
        importlib.import_module(f"ofa.commands.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    args.command_line = shlex.join(["ofa", *argv])  # what a table's meta records as the command that built it
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except OFAError as exc:
        print(f"ofa {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"ofa {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
