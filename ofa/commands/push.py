"""``ofa push``: upload a model folder written by ``ofa export --out DIR`` to the Hugging Face Hub."""

from __future__ import annotations

import argparse
from pathlib import Path

from ofa.commands._flags import add_flags, flag_values
from ofa.export.push import PushConfig, push_folder


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "push",
        help="upload an exported model folder to the Hugging Face Hub",
        description="Check FOLDER (model.safetensors, timm's config.json, a README.md model card that parses) and "
        "upload it as one commit with huggingface_hub, creating the model repo if needed. Needs a "
        "login (`hf auth login` or HF_TOKEN) and the network.",
    )
    p.add_argument("folder", metavar="FOLDER", help="model folder written by `ofa export --out DIR`")
    add_flags(p, PushConfig)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cfg = PushConfig(Path(args.folder), **flag_values(PushConfig, args))
    result = push_folder(cfg)
    print(f"pushed {cfg.folder} -> {result.url}" + (f" (commit {result.commit})" if result.commit else ""))
    return 0
