"""The supernet file and training checkpoint formats, shared by every family: a space mapping, weights, meta
(and the official checkpoints every family imports: their raw state, their tensors copied by a key map).

Reading one needs no family: the registry reads the record, picks the family by the space's
``family:`` key and hands the record to that family's supernet type (``from_record``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn

from ofa.utils.errors import OFAError
from ofa.utils.io import file_sha256, load_torch, save_torch
from ofa.utils.weights import load_safetensors, save_safetensors

SUPERNET_FORMAT = "ofa-supernet"
CHECKPOINT_FORMAT = "ofa-checkpoint"
SAFETENSORS = ".safetensors"
Net = TypeVar("Net", bound=nn.Module)


def write_supernet(path: str | Path, net: Any, meta: Mapping[str, Any] | None = None) -> Path:
    """Supernet file of ``net`` (any family): its space mapping, weights and plain metadata; a ``.safetensors``
    path writes safetensors with the rest as JSON in its header (no pickle at all)."""
    record = {"format": SUPERNET_FORMAT, "space": net.space.to_dict(), "meta": dict(meta or {})}
    if Path(path).suffix == SAFETENSORS:
        return save_safetensors(path, net.state_dict(), record)
    return save_torch(path, {**record, "state_dict": net.state_dict()})


def read_space_dict(path: str | Path) -> dict[str, Any]:
    """The space mapping stored in a supernet file or training checkpoint (to build a recipe around it)."""
    obj = load_torch(path, "supernet file")
    if obj.get("format") not in (SUPERNET_FORMAT, CHECKPOINT_FORMAT) or not isinstance(obj.get("space"), dict):
        raise OFAError(
            f"{path}: not an ofa supernet file or training checkpoint (format={obj.get('format')!r}; "
            "official once-for-all checkpoints need `ofa import` first)"
        )
    return obj["space"]


def read_official_state(path: str | Path) -> Mapping[str, Any]:
    """The raw state dict of an official once-for-all checkpoint (any family): one line for a file that is none."""
    obj = load_torch(path, "official OFA checkpoint")
    if obj.get("format") in (SUPERNET_FORMAT, CHECKPOINT_FORMAT):
        raise OFAError(f"{path}: already an {obj['format']} file of this toolkit; load it directly, nothing to import")
    state = obj.get("state_dict", obj)
    if not isinstance(state, Mapping) or not state:
        raise OFAError(f"{path}: no state_dict in the checkpoint (keys: {sorted(map(str, obj))[:5]})")
    bad = next((k for k, v in state.items() if not isinstance(v, torch.Tensor)), None)
    if bad is not None:
        raise OFAError(
            f"{path}: not an official once-for-all checkpoint (entry {bad!r} is a {type(state[bad]).__name__}, "
            "not a tensor)"
        )
    return state


def load_by_key_map(
    net: Net, state: Mapping[str, torch.Tensor], key_map: Mapping[str, str], source: str, what: str
) -> Net:
    """Copy every official tensor into ``net`` by ``key_map`` (official → ours): each key known, none
    missing, every shape equal; ``what`` names the network in the messages."""
    ours = net.state_dict()
    extra = sorted(set(state) - set(key_map))
    if extra:
        raise OFAError(f"{source}: unexpected key {extra[0]!r} for {what} of the inferred space")
    missing = sorted(set(key_map) - set(state))
    if missing:
        raise OFAError(f"{source}: missing key {missing[0]!r}")
    for official, mine in key_map.items():
        if tuple(state[official].shape) != tuple(ours[mine].shape):
            raise OFAError(
                f"{source}: {official} has shape {list(state[official].shape)}, expected "
                f"{list(ours[mine].shape)} for the inferred space"
            )
        ours[mine] = state[official]
    net.load_state_dict(ours)
    return net


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


# How the official ImageNet models expect their input (official imagenet data provider).
OFFICIAL_PREPROCESS = {
    "mean": [0.485, 0.456, 0.406],
    "std": [0.229, 0.224, 0.225],
    "interpolation": "bilinear",
    "crop_pct": 0.875,
}


def finish_import(
    net: Net, path: str | Path, code: str, config: Any, fold: Callable[[Net, int], Net], rehead: Callable[..., Net]
) -> Net:
    """``net``, holding the official weights from ``path``, with what every import records in ``net.meta``
    (the official preprocessing, where the weights came from, ``code``: the official class) and the transfer
    surgery ``config`` (an import config) asks for: ``fold`` to its input channels, ``rehead`` to its classes.
    Its BN statistics are the supernet's, so each subnet needs BN recalibration before it is deployed."""
    net.meta = {
        **OFFICIAL_PREPROCESS,
        "imported_from": {
            "file": Path(path).name,
            "sha256": file_sha256(path),
            "code": f"mit-han-lab/once-for-all {code}",
        },
        "bn_recalibration": "required: official subnets are evaluated with per-subnet BN statistics",
    }
    if config.in_channels is not None and config.in_channels != net.space.in_channels:
        net = fold(net, config.in_channels)
    if config.num_classes is not None:
        net = rehead(net, config.num_classes, config.seed)
    return net
