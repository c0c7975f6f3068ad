"""The accuracy file ``ofa predictor collect`` writes: a header line, then one JSON line per measured subnet
(appended as measured, so a crash loses at most a cut-off last line), and under torchrun one part file per
rank that rank 0 merges. `load_accuracy` reads it as the arrays `fit_predictor` consumes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ofa.families.family import Space
from ofa.families.registry import arch_from_dict, layout_of, space_from_dict
from ofa.utils.errors import OFAError
from ofa.utils.io import write_text

FILE_KIND = "ofa-accuracy"


def part_path(out: Path, rank: int) -> Path:
    return out.with_name(f"{out.name}.rank{rank}.part")


def part_files(out: Path) -> list[Path]:
    return sorted(out.parent.glob(f"{out.name}.rank*.part"))


def read_lines(path: Path) -> tuple[list[dict[str, Any]], bool]:
    """Parsed JSON lines, and whether the file ends in a cut-off line (a crash mid-write), which is skipped."""
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise OFAError(f"{path}: not a JSON-lines accuracy file (binary content)") from None
    lines = text.split("\n")
    truncated = bool(lines[-1])
    out = []
    for no, line in enumerate(lines[:-1], 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            raise OFAError(f"{path}:{no}: not a JSON line") from None
        if not isinstance(obj, dict):
            raise OFAError(f"{path}:{no}: expected a JSON object")
        out.append(obj)
    return out, truncated


def read_accuracy(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(header, records by index) of a collection file plus any unmerged part files next to it."""
    path = Path(path)
    if not path.is_file():
        raise OFAError(f"{path}: accuracy file not found (make one with `ofa predictor collect`)")
    lines, _ = read_lines(path)
    if not lines or lines[0].get("kind") != FILE_KIND:
        raise OFAError(f"{path}: not an accuracy file from `ofa predictor collect` (no header line)")
    header, records = lines[0], lines[1:]
    for part in part_files(path):
        records += read_lines(part)[0]
    by_index: dict[int, dict[str, Any]] = {}
    for rec in records:
        if not isinstance(rec.get("index"), int) or not isinstance(rec.get("arch"), dict) or "top1" not in rec:
            raise OFAError(f"{path}: malformed record {json.dumps(rec)[:80]} (needs index, arch, top1)")
        by_index.setdefault(rec["index"], rec)
    return header, [by_index[i] for i in sorted(by_index)]


@dataclass
class AccuracyData:
    """A collection as arrays: what `fit_predictor` consumes."""

    space: Space
    rows: np.ndarray
    top1: np.ndarray  # float32
    halves: tuple[np.ndarray, np.ndarray] | None
    header: dict[str, Any]
    top1_int8: np.ndarray | None = None  # INT8 data only (``dtype: int8``), paired with ``top1``

    @property
    def dtype(self) -> str:
        """What the data measured besides float32: ``int8`` or ``float32`` (files that name none)."""
        return str(self.header.get("dtype") or "float32")


def load_accuracy(path: str | Path) -> AccuracyData:
    header, records = read_accuracy(path)
    space = space_from_dict(header.get("space") or {}, f"{path}: header.space")
    rows = layout_of(space).encode_many(
        [
            space.validate(
                arch_from_dict(space, r["arch"], f"{path}: subnet {r['index']}"), f"{path}: subnet {r['index']}"
            )
            for r in records
        ]
    )
    keys = ("top1", "top1_a", "top1_b") if header.get("repeat_split") else ("top1",)
    keys += ("top1_int8",) if header.get("dtype") == "int8" else ()
    values = np.zeros((len(keys), len(records)))
    for j, rec in enumerate(records):
        for k, key in enumerate(keys):
            try:
                values[k, j] = float(rec[key])
            except (KeyError, TypeError, ValueError):
                raise OFAError(f"{path}: subnet {rec['index']}: {key!r} missing or not a number") from None
    halves = (values[1], values[2]) if "top1_a" in keys else None
    int8 = values[-1] if "top1_int8" in keys else None
    return AccuracyData(space, rows, values[0], halves, header, int8)


def merge_parts(out: str | Path) -> int:
    """Fold rank part files into ``out`` (sorted by index, atomically), then remove them; returns the count."""
    out = Path(out)
    parts = part_files(out)
    header, records = read_accuracy(out)
    if parts or read_lines(out)[1]:
        write_text(out, "".join(json.dumps(r) + "\n" for r in [header, *records]))
        for part in parts:
            part.unlink(missing_ok=True)
    return len(records)


def repair(path: Path) -> None:
    """Drop a cut-off last line so appends start on a fresh line (complete lines are kept)."""
    if path.is_file() and read_lines(path)[1]:
        text = path.read_text()
        write_text(path, text[: text.rfind("\n") + 1])


def append_line(path: Path, obj: dict[str, Any]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(obj) + "\n")
        f.flush()
        os.fsync(f.fileno())
