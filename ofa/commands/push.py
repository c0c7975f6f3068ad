"""``ofa push``: upload a model folder written by ``ofa export --out DIR`` to the Hugging Face Hub."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "push",
        help="upload an exported model folder to the Hugging Face Hub",
        description="Check FOLDER (model.safetensors, timm's config.json, a README.md model card that parses) and "
        "upload it as one commit with huggingface_hub, creating the model repo if needed. Needs a "
        "login (`hf auth login` or HF_TOKEN) and the network.",
    )
    p.add_argument("folder", metavar="FOLDER", help="model folder written by `ofa export --out DIR`")
    p.add_argument("--repo-id", required=True, metavar="OWNER/NAME", help="Hub model repo to upload to")
    p.add_argument("--private", action="store_true", help="create the repo private (when it does not exist)")
    p.add_argument("--revision", metavar="BRANCH", help="branch to commit to (default: main)")
    p.add_argument("--message", default="Upload a once-for-all subnet exported by `ofa export`", help="commit message")
    p.add_argument("--endpoint", metavar="URL", help="Hub endpoint (default: huggingface_hub's, HF_ENDPOINT)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ofa.export.push import PushConfig, push_folder

    cfg = PushConfig(
        Path(args.folder),
        args.repo_id,
        private=args.private,
        revision=args.revision,
        message=args.message,
        endpoint=args.endpoint,
    )
    result = push_folder(cfg)
    print(f"pushed {cfg.folder} -> {result.url}" + (f" (commit {result.commit})" if result.commit else ""))
    return 0
