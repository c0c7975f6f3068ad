"""Adapt a supernet to a user's data: a fresh classifier for their classes, a stem for their channels.

Both keep every other weight, so the elastic stages' ImageNet features carry over to the new task.
Any elastic-MBConv supernet (`ElasticMBConvNet`: OFA-MBv3, OFA-ProxylessNAS) with timm's
``conv_stem`` and ``classifier`` adapts the same way, so these take the supernet's own types.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, replace
from typing import Any, TypeVar

import torch
from timm.models import adapt_input_conv

from ofa.families.mbv3.elastic.net import ElasticMBConvNet
from ofa.utils.errors import OFAError

Net = TypeVar("Net", bound=ElasticMBConvNet)
Space = TypeVar("Space")


def rehead(net: Net, num_classes: int, seed: int = 0) -> Net:
    """A copy of ``net`` with a freshly initialised ``num_classes``-way classifier (timm's init, seeded)."""
    if num_classes < 1:
        raise OFAError(f"--num-classes: must be positive, got {num_classes}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        new = type(net)(replace(net.space, num_classes=num_classes))
    state = {k: v for k, v in net.state_dict().items() if not k.startswith("classifier.")}
    state.update({k: v for k, v in new.state_dict().items() if k.startswith("classifier.")})
    new.load_state_dict(state)
    # Until the whole supernet is trained again (which writes fresh meta), it cannot teach its subnets.
    new.meta = {**{k: v for k, v in getattr(net, "meta", {}).items() if k != "class_names"}, "fresh_classifier": True}
    return new


def fold_input_channels(net: Net, in_channels: int) -> Net:
    """A copy of ``net`` whose stem takes ``in_channels`` inputs (RGB weights summed for 1, as timm does).

    Normalization in ``meta`` follows: one channel gets the mean of the RGB means and stds.
    """
    if in_channels < 1:
        raise OFAError(f"--in-channels: must be positive, got {in_channels}")
    new = type(net)(replace(net.space, in_channels=in_channels))
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


# Space fields a recipe may change when it starts from a supernet file: the first two change no
# weight, the last two are what `rehead` and `fold_input_channels` adapt.
FREE_FIELDS = ("resolutions", "dropout")
ADAPTED_FIELDS = ("num_classes", "in_channels")


def derive_space(base: Space, overrides: Mapping[str, Any] | None, where: str = "space") -> Space:
    """``base`` with the keys of ``overrides`` on top; only `FREE_FIELDS` and `ADAPTED_FIELDS` may change."""
    if overrides is not None and not isinstance(overrides, Mapping):
        raise OFAError(f"{where}: expected a mapping of space keys to change, got {overrides!r}")
    merged = type(base).from_dict({**base.to_dict(), **(overrides or {})}, where)
    for f in fields(base):
        if f.name not in FREE_FIELDS + ADAPTED_FIELDS and getattr(merged, f.name) != getattr(base, f.name):
            raise OFAError(
                f"{where}.{f.name}: differs from the starting supernet's; only "
                f"{', '.join(FREE_FIELDS + ADAPTED_FIELDS)} can change"
            )
    return merged


def adapt_supernet(net: Net, space: Space, seed: int = 0) -> Net:
    """``net`` fitted to ``space``: stem folded and/or classifier replaced where they differ."""
    if space.in_channels != net.space.in_channels:
        net = fold_input_channels(net, space.in_channels)
    if space.num_classes != net.space.num_classes:
        net = rehead(net, space.num_classes, seed)
    return net
