"""Static subnets: ordinary timm ``ByobNet`` models built from an arch of an OFA-ResNet space.

One ``ByoBlockCfg('bottle', d=1, ...)`` per block with ``downsample='avg'`` is the official bottleneck
(stride in the 3x3 conv, avg-pool + 1x1 conv shortcut); the stem is timm's 3x3 ``Stem`` stack of the
stem widths. No timm stem computes the official residual stem block, so `timm_model` patches it in with
one line (`STEM_PATCH`, which a model card prints), and sets the stem convs' strides when they are not
timm's ``[2, 1, ...]`` (a stem of stride 1, or one without the max-pool).
"""

from __future__ import annotations

from typing import Any

import torch
from timm.models.byobnet import ByoBlockCfg, ByobNet, ByoModelCfg
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ofa.families.resnet.arch import ResNetArch
from ofa.families.resnet.layers import STEM_PATCH, add_block_input
from ofa.families.resnet.space import ResNetSpace

__all__ = [
    "STEM_PATCH",
    "TIMM_SNIPPET",
    "build_subnet",
    "count_macs",
    "count_params",
    "timm_args",
    "timm_model",
    "timm_snippet",
]

_SNIPPET = """\
import json

from safetensors.torch import load_file
from timm.models.byobnet import ByobNet, ByoBlockCfg, ByoModelCfg

a = json.load(open("{config}"))["{key}"]
blocks = tuple(tuple(ByoBlockCfg(**block) for block in stage) for stage in a["blocks"])
model = ByobNet(ByoModelCfg(blocks=blocks, **a["cfg"]), **a["kwargs"])
if a["stem_residual"]:  # the official stem's residual 3x3 conv block
    PATCH
for i, stride in enumerate(a["stem_strides"]):  # timm's Stem fixes [2, 1, ..] (and 2 last without the pool)
    getattr(model.stem, f"conv{{i + 1}}").conv.stride = (stride, stride)
model.load_state_dict(load_file("{weights}"))
model.eval()
"""
# What a model card prints, placeholders {config}, {key}, {weights} (``str.format``; `timm_snippet` fills them).
TIMM_SNIPPET = _SNIPPET.replace("PATCH", STEM_PATCH)


def timm_args(space: ResNetSpace, arch: ResNetArch) -> dict[str, Any]:
    """JSON arguments of timm's ByobNet for ``arch``; a model folder's config.json records them so that timm
    alone (plus `STEM_PATCH`) rebuilds the subnet (`timm_model` is the code its model card shows)."""
    mid, stem_out, _ = space.channels(arch)
    residual = space.stem_block_runs(arch)
    specs = iter(layer for layer in space.layers(arch) if layer.kind == "bottleneck")
    blocks = [
        [{"type": "bottle", "d": 1, "c": spec.out_c, "s": spec.stride, "br": spec.mid / spec.out_c} for spec in stage]
        for stage in ([next(specs) for _ in range(space.stage_depth(arch, s))] for s in range(space.num_stages))
    ]
    stem_chs = [mid, mid, stem_out] if residual else [mid, stem_out]
    return {
        "blocks": blocks,
        "cfg": {
            "downsample": "avg",
            "stem_type": "3x3",
            "stem_pool": "maxpool" if space.stem_pool else "",
            "stem_chs": stem_chs,
            "act_layer": "relu",
        },
        "kwargs": {"num_classes": space.num_classes, "in_chans": space.in_channels, "drop_rate": space.dropout},
        "stem_residual": residual,  # apply STEM_PATCH
        "stem_strides": [space.stem_stride] + [1] * (len(stem_chs) - 1),
    }


def timm_model(args: dict[str, Any]) -> ByobNet:
    """A randomly initialised timm ByobNet from `timm_args`: timm's constructor, then the stem patch
    ``model.stem.conv2.register_forward_hook(lambda module, args, out: args[0] + out)`` when
    ``stem_residual``, and the stem strides."""
    blocks = tuple(tuple(ByoBlockCfg(**block) for block in stage) for stage in args["blocks"])
    model = ByobNet(ByoModelCfg(blocks=blocks, **args["cfg"]), **args["kwargs"])
    if args["stem_residual"]:
        model.stem.conv2.register_forward_hook(add_block_input)
    for i, stride in enumerate(args["stem_strides"]):
        getattr(model.stem, f"conv{i + 1}").conv.stride = (stride, stride)
    return model


def timm_snippet(config: str, key: str, weights: str) -> str:
    """The code a model card prints to rebuild the subnet with timm alone: `timm_model` on the args stored
    under ``key`` of the folder's ``config`` file, then the ``weights`` (safetensors)."""
    return TIMM_SNIPPET.format(config=config, key=key, weights=weights)


def build_subnet(space: ResNetSpace, arch: ResNetArch) -> ByobNet:
    """A randomly initialised timm ByobNet with exactly the layers of ``arch``."""
    space.validate(arch)
    return timm_model(timm_args(space, arch))


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def count_macs(model: nn.Module, resolution: int, in_channels: int = 3) -> int:
    """MACs measured by torch's FLOP counter (FLOPs / 2) for one image."""
    was_training = model.training
    model.eval()
    counter = FlopCounterMode(display=False)
    with counter:
        model(torch.zeros(1, in_channels, resolution, resolution))
    model.train(was_training)
    return counter.get_total_flops() // 2
