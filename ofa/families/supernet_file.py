"""The supernet file and training checkpoint formats, shared by every family: a space mapping, weights, meta.

Reading one needs no family: the registry reads the record, picks the family by the space's
``family:`` key and hands the record to that family's supernet type (``from_record``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ofa.utils.errors import OFAError
from ofa.utils.io import load_torch
from ofa.utils.weights import load_safetensors

SUPERNET_FORMAT = "ofa-supernet"
CHECKPOINT_FORMAT = "ofa-checkpoint"
SAFETENSORS = ".safetensors"


def read_space_dict(path: str | Path) -> dict[str, Any]:
    """The space mapping stored in a supernet file or training checkpoint (to build a recipe around it)."""
    obj = load_torch(path, "supernet file")
    if obj.get("format") not in (SUPERNET_FORMAT, CHECKPOINT_FORMAT) or not isinstance(obj.get("space"), dict):
        raise OFAError(
            f"{path}: not an ofa supernet file or training checkpoint (format={obj.get('format')!r}; "
            "official once-for-all checkpoints need `ofa import` first)"
        )
    return obj["space"]


def read_record(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(record, state dict) of a supernet file (``.safetensors`` or torch) or a training checkpoint."""
    if Path(path).suffix == SAFETENSORS:
        state, obj = load_safetensors(path, "supernet file")
        obj = {**obj, "state_dict": state}
    else:
        obj = load_torch(path, "supernet checkpoint")
    fmt = obj.get("format")
    if fmt == SUPERNET_FORMAT:
        state = obj.get("state_dict")
    elif fmt == CHECKPOINT_FORMAT:
        state = obj.get("model")
    else:
        raise OFAError(f"{path}: not an ofa supernet or training checkpoint (format={fmt!r})")
    if not isinstance(obj.get("space"), dict) or not isinstance(state, dict):
        raise OFAError(f"{path}: checkpoint lacks its space or weights")
    return obj, state
