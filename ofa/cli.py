"""The ``ofa`` command. Each verb lives in its own module under ``ofa.commands``.

A command module defines ``register(subparsers)``, which adds its parser(s) and sets
``func=run`` where ``run(args) -> int`` returns the exit status (`ofa.commands.flags`, which builds
their options from config dataclasses, is the one module there without it). User errors (`OFAError`) print
one line and exit 2; no traceback reaches the user for bad input.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import shlex
import sys
from collections.abc import Sequence

from ofa.utils.errors import OFAError


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line naming the command and the problem."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    import ofa.commands

    parser = OneLineParser(prog="ofa", description="Once-for-all supernet toolkit: train, search, export.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for info in sorted(pkgutil.iter_modules(ofa.commands.__path__), key=lambda m: m.name):
        if info.name != "flags":
            importlib.import_module(f"ofa.commands.{info.name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
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
