"""Static subnet files and model folders of any family: the record beside the weights, and rebuilding from it.

A record names its space (with its ``family:`` key where not mbv3) and arch, so `load_subnet` rebuilds
the timm model with the family's ``build_subnet`` and no supernet.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from ofa.families.family import Arch, Space
from ofa.families.registry import arch_from_dict, family_of, space_from_dict
from ofa.utils.errors import OFAError
from ofa.utils.io import load_torch, read_json, save_torch
from ofa.utils.weights import load_safetensors

SUBNET_FORMAT = "ofa-subnet"
FOLDER_CONFIG, FOLDER_WEIGHTS = "config.json", "model.safetensors"  # a model folder's files


def subnet_record(space: Space, arch: Arch, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a subnet file (and a model folder's config.json, under ``ofa``) says besides the weights."""
    return {
        "format": SUBNET_FORMAT,
        "space": space.to_dict(),
        "space_fingerprint": space.fingerprint(),
        "arch": arch.to_dict(),
        "meta": meta or {},
    }


def save_subnet(
    model: nn.Module, space: Space, arch: Arch, path: str | Path, meta: dict[str, Any] | None = None
) -> Path:
    """Write a static subnet (config + weights) that `load_subnet` rebuilds without the supernet."""
    return save_torch(path, {**subnet_record(space, arch, meta), "state_dict": model.state_dict()})


def load_subnet(path: str | Path) -> nn.Module:
    """Rebuild a saved static subnet (a ``.pt`` file or a model folder written by ``ofa export``) as a plain
    timm model in eval mode; ``model.ofa_meta`` holds its metadata."""
    path = Path(path)
    if path.is_dir():
        config = read_json(path / FOLDER_CONFIG, "model folder config")
        record = config.get("ofa") if isinstance(config, dict) else None
        if not isinstance(record, dict):
            raise OFAError(f"{path / FOLDER_CONFIG}: not an ofa model folder (no 'ofa' section)")
        state, _ = load_safetensors(path / FOLDER_WEIGHTS, "model weights")
        return _rebuild(path, record, state)
    obj = load_torch(path, "subnet file")
    return _rebuild(path, obj, obj.get("state_dict"))


def _rebuild(path: Path, record: dict[str, Any], state: Any) -> nn.Module:
    if record.get("format") != SUBNET_FORMAT:
        raise OFAError(f"{path}: not an ofa subnet file (format={record.get('format')!r})")
    missing = [k for k in ("space", "arch") if k not in record] + ([] if isinstance(state, dict) else ["weights"])
    if missing:
        raise OFAError(f"{path}: subnet file lacks {missing[0]!r} (damaged or hand-made); export it again")
    space = space_from_dict(record["space"], f"{path}:space")
    arch = arch_from_dict(space, record["arch"], f"{path}:arch")
    model = family_of(space).build_subnet(space, arch)
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError) as exc:
        raise OFAError(f"{path}: weights do not match the stored arch: {str(exc).splitlines()[0]}") from None
    model.ofa_meta = {"space": space, "arch": arch, **record.get("meta", {})}
    return model.eval()
