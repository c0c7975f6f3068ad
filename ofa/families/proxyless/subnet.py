"""Static subnets: ordinary timm ``EfficientNet`` models built from an arch of a ProxylessNAS space."""

from __future__ import annotations

import math
from functools import partial
from typing import Any

from timm.layers import get_act_layer
from timm.models._efficientnet_builder import decode_arch_def, round_channels
from timm.models.efficientnet import EfficientNet
from torch import nn

from ofa.families.counts import count_macs, count_params
from ofa.families.proxyless.arch import ProxylessArch
from ofa.families.proxyless.layers import BN_EPS
from ofa.families.proxyless.space import ProxylessSpace

__all__ = ["block_strings", "build_subnet", "count_macs", "count_params", "timm_args", "timm_model"]


def block_strings(space: ProxylessSpace, arch: ProxylessArch) -> list[list[str]]:
    """timm arch-definition strings, one list per stage: the fixed first block, then the elastic stages."""
    stages: list[list[str]] = [[f"ds_r1_k3_s1_c{space.first_channels}_noskip"]]
    stages += [[] for _ in space.stages]
    for s, j, spec in space.iter_blocks(arch):
        expand = arch.expands[space.slot(s, j)]
        stages[s + 1].append(f"ir_r1_k{spec.kernel}_s{spec.stride}_e{expand}_c{spec.out_c}")
    return stages


def timm_args(space: ProxylessSpace, arch: ProxylessArch) -> dict[str, Any]:
    """JSON arguments of timm's EfficientNet for ``arch``; a model folder's config.json records them so that
    timm alone rebuilds the subnet (`timm_model` is that code)."""
    return {
        "arch_def": block_strings(space, arch),
        "kwargs": {
            "num_classes": space.num_classes,
            "in_chans": space.in_channels,
            "stem_size": space.stem_channels,
            "fix_stem": True,
            "num_features": space.feature_channels,
            "drop_rate": space.dropout,
            # timm counts the stem as stride 2; past this it would trade later strides for dilation
            "output_stride": 2 * math.prod(s.stride for s in space.stages),
        },
        "act_layer": "relu6",
        "bn_eps": BN_EPS,
        "stem_stride": space.stem_stride,  # timm's constructor fixes the stem at stride 2
    }


def timm_model(args: dict[str, Any]) -> EfficientNet:
    """A randomly initialised timm EfficientNet from `timm_args`."""
    model = EfficientNet(
        block_args=decode_arch_def(args["arch_def"]),
        act_layer=get_act_layer(args["act_layer"]),
        norm_layer=partial(nn.BatchNorm2d, eps=args["bn_eps"]),
        round_chs_fn=round_channels,
        **args["kwargs"],
    )
    model.conv_stem.stride = (args["stem_stride"], args["stem_stride"])
    return model


def build_subnet(space: ProxylessSpace, arch: ProxylessArch) -> EfficientNet:
    """A randomly initialised timm EfficientNet with exactly the layers of ``arch``."""
    space.validate(arch)
    return timm_model(timm_args(space, arch))
