"""Training checkpoints: atomic, rotated, loadable with ``torch.load(weights_only=True)``.

Files are ``checkpoints/step-NNNNNNNNN.pt`` (global optimizer step). The newest ``keep`` are
kept, so when the latest is damaged (disk full, copied half-way) its predecessor is still there.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ofa.families.supernet_file import CHECKPOINT_FORMAT
from ofa.utils.errors import OFAError
from ofa.utils.io import load_torch, save_torch

_NAME = re.compile(r"^step-(\d+)\.pt$")
REQUIRED = ("model", "space", "meta", "phase", "epoch", "step", "global_step")


class CheckpointStore:
    """The checkpoint folder of one run."""

    def __init__(self, folder: str | Path, keep: int = 2) -> None:
        self.folder, self.keep = Path(folder), keep

    def paths(self) -> list[Path]:
        """Checkpoints, oldest first."""
        if not self.folder.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.folder.iterdir() if (m := _NAME.match(p.name))]
        return [p for _, p in sorted(found)]

    def save(self, state: dict[str, Any]) -> Path:
        path = save_torch(self.folder / f"step-{state['global_step']:09d}.pt", {"format": CHECKPOINT_FORMAT, **state})
        for old in self.paths()[: -self.keep]:
            old.unlink(missing_ok=True)
        return path

    def remove_partial_writes(self) -> None:
        """Temporary files left by a process killed while writing a checkpoint."""
        if self.folder.is_dir():
            for tmp in self.folder.glob(".step-*.tmp"):
                tmp.unlink(missing_ok=True)

    def load_latest(self) -> dict[str, Any] | None:
        """The newest checkpoint, or None if there is none; a damaged one is an error naming it."""
        paths = self.paths()
        if not paths:
            return None
        try:
            return load_checkpoint(paths[-1])
        except OFAError as exc:
            hint = (
                f"; the previous checkpoint {paths[-2]} is intact: delete the damaged file and resume again"
                if len(paths) > 1
                else ""
            )
            raise OFAError(f"{exc}{hint}") from None


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    obj = load_torch(path, "training checkpoint")
    if obj.get("format") != CHECKPOINT_FORMAT:
        raise OFAError(f"{path}: not an ofa training checkpoint (format={obj.get('format')!r})")
    missing = [k for k in REQUIRED if k not in obj]
    if missing:
        raise OFAError(f"{path}: training checkpoint lacks {', '.join(missing)}")
    return obj
