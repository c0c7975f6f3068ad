"""Adapt a supernet to a user's data: a fresh classifier for their classes, a stem for their channels.

Both keep every other weight, so the elastic stages' ImageNet features carry over to the new task.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from timm.models import adapt_input_conv

from ofa.errors import OFAError
from ofa.supernet import OFAMobileNetV3


def rehead(net: OFAMobileNetV3, num_classes: int, seed: int = 0) -> OFAMobileNetV3:
    """A copy of ``net`` with a freshly initialised ``num_classes``-way classifier (timm's init, seeded)."""
    if num_classes < 1:
        raise OFAError(f"--num-classes: must be positive, got {num_classes}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        new = OFAMobileNetV3(replace(net.space, num_classes=num_classes))
    state = {k: v for k, v in net.state_dict().items() if not k.startswith("classifier.")}
    state.update({k: v for k, v in new.state_dict().items() if k.startswith("classifier.")})
    new.load_state_dict(state)
    new.meta = {k: v for k, v in getattr(net, "meta", {}).items() if k != "class_names"}
    return new


def fold_input_channels(net: OFAMobileNetV3, in_channels: int) -> OFAMobileNetV3:
    """A copy of ``net`` whose stem takes ``in_channels`` inputs (RGB weights summed for 1, as timm does).

    Normalization in ``meta`` follows: one channel gets the mean of the RGB means and stds.
    """
    if in_channels < 1:
        raise OFAError(f"--in-channels: must be positive, got {in_channels}")
    new = OFAMobileNetV3(replace(net.space, in_channels=in_channels))
    state = dict(net.state_dict())
    state["conv_stem.weight"] = adapt_input_conv(in_channels, state["conv_stem.weight"].clone())
    new.load_state_dict(state)
    meta: dict[str, Any] = dict(getattr(net, "meta", {}))
    for key in ("mean", "std"):
        values = meta.get(key)
        if isinstance(values, list) and len(values) != in_channels:
            avg = sum(values) / len(values)
            meta[key] = [avg] * in_channels
    new.meta = meta
    return new
