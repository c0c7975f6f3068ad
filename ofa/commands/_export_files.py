"""``ofa export`` from files: the supernet (or a fine-tuned subnet), the arch JSON, the latency table and the
data the weights record, loaded and handed to `ofa.export.export`, which checks the arch once, at its entry.

Notes on what is missing go to stderr; bad files raise `OFAError` naming the file.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from ofa.data.datasets import data_from_meta
from ofa.export.export import ExportConfig, export_finetuned, export_subnet
from ofa.export.result import ExportResult
from ofa.families.family import Arch, Space
from ofa.families.registry import load_arch, load_supernet
from ofa.families.subnet_file import load_subnet
from ofa.utils.errors import OFAError
from search.latency import LatencyTable


def export_file(
    supernet: Path | None, arch: Path | None, cfg: ExportConfig, lut: Path | None = None, subnet: Path | None = None
) -> ExportResult:
    """`export_subnet` from files: the supernet (its meta names the data), an arch JSON and an optional table;
    or, given ``subnet`` (a file `ofa finetune` wrote) instead of both, `export_finetuned` of that subnet.

    Without ``lut`` the arch's ``lut`` field names the table (as written, or relative to the arch file)
    when that file exists.
    """
    if subnet is not None:
        return _export_finetuned_file(subnet, supernet, arch, cfg, lut)
    if supernet is None:
        raise OFAError("--supernet (with --arch) or --subnet (a subnet file written by `ofa finetune`) is required")
    if arch is None:
        raise OFAError(
            "--arch is required: the supernet itself is not exported; give a subnet's arch JSON "
            "(e.g. written by `ofa search`)"
        )
    check_arch_file(arch)
    net = load_supernet(supernet).eval()
    chosen = load_arch_file(net.space, arch)
    if chosen.space is None:
        _note(
            f"{arch}: names no space fingerprint (a hand-written or converted arch?); checked against the "
            "supernet's space by its values only"
        )
    table_path = _find_table(lut, chosen, arch)
    table = LatencyTable.load(table_path) if table_path is not None else None
    cfg = replace(cfg, checkpoint=Path(supernet), arch_source=str(arch))
    return export_subnet(net, chosen, cfg, data=_load_data(net.meta, supernet), table=table)


def _export_finetuned_file(
    subnet: Path, supernet: Path | None, arch: Path | None, cfg: ExportConfig, lut: Path | None
) -> ExportResult:
    """`export_finetuned` of a subnet file; its meta names the data it was fine-tuned on."""
    if supernet is not None or arch is not None:
        raise OFAError(
            f"--subnet {subnet}: a subnet file carries its own arch and weights; give it without --supernet and --arch"
        )
    model = load_subnet(subnet)
    cfg = replace(cfg, checkpoint=Path(subnet), arch_source=f"{subnet}:arch")
    table_path = _find_table(lut, model.ofa_meta["arch"], Path(subnet))
    table = LatencyTable.load(table_path) if table_path is not None else None
    return export_finetuned(model, cfg, data=_load_data(model.ofa_meta, subnet, supernet=False), table=table)


def load_arch_file(space: Space, path: str | Path) -> Arch:
    """Read an arch JSON of ``space``'s family (a path `check_arch_file` passed)."""
    try:
        return load_arch(space, path)
    except UnicodeDecodeError:
        raise OFAError(f"{path}: not an arch JSON (binary file)") from None


def check_arch_file(path: str | Path) -> None:
    """An arch path that is no file, or is a weights file, is one line saying so (before any supernet loads)."""
    path = Path(path)
    if not path.is_file():
        raise OFAError(f"{path}: arch file not found")
    with path.open("rb") as fh:
        head = fh.read(4)
    if head.startswith(b"PK") or head.startswith(b"\x80") or path.suffix == ".safetensors":
        kind = "a safetensors weights file" if path.suffix == ".safetensors" else "a PyTorch checkpoint"
        raise OFAError(
            f"{path}: this is {kind}, not an arch JSON; the supernet itself is not "
            "exported (give the subnet's arch.json, e.g. from `ofa search`)"
        )


def _note(text: str) -> None:
    print(f"note: {text}", file=sys.stderr)


def _find_table(lut: Path | None, arch: Arch, arch_path: Path) -> Path | None:
    """``lut``, else the arch's ``lut`` field (as written, or relative to the arch file) when it exists."""
    if lut:
        return Path(lut)
    name = arch.extra.get("lut")
    if not isinstance(name, str):
        return None
    for candidate in (Path(name), arch_path.parent / name):
        if candidate.is_file():
            return candidate
    _note(
        f"{arch_path}: its latency table {name} does not exist here; latency is measured with the default "
        "protocol and not compared with a prediction"
    )
    return None


def _load_data(meta: dict[str, Any], ckpt: Path, supernet: bool = True) -> Any:
    """The data a supernet or subnet file was trained on, from its meta; None (with a note) when unrecorded."""
    if meta.get("data"):
        return data_from_meta(meta)
    if meta.get("bn_recalibration"):
        print(
            f"WARNING: {ckpt} is an imported supernet that records no training images: this subnet keeps the "
            "whole supernet's BN statistics and its accuracy WILL SUFFER. Fine-tune on your data first "
            "(`ofa train` with init.supernet, or `ofa finetune`), which records the images for recalibration.",
            file=sys.stderr,
        )
    kept = "BN statistics stay the supernet's, " if supernet else ""
    _note(f"{ckpt} records no training data: {kept}parity uses random inputs only and accuracy is not measured")
    return None
