"""Static subnets: ordinary timm MobileNetV3 models built from an arch of a search space."""

from __future__ import annotations

from functools import partial
from typing import Any

from timm.layers import get_act_layer
from timm.models._efficientnet_blocks import SqueezeExcite
from timm.models._efficientnet_builder import decode_arch_def, round_channels
from timm.models.mobilenetv3 import MobileNetV3
from torch import nn

from ofa.families.mbv3.arch import Arch
from ofa.families.mbv3.space import SearchSpace


def act_layer(name: str) -> type[nn.Module]:
    return get_act_layer(_timm_act(name))


def _timm_act(name: str) -> str:
    return "hard_swish" if name == "hswish" else name


def block_strings(space: SearchSpace, arch: Arch) -> list[list[str]]:
    """timm arch-definition strings, one list per stage: fixed first block, elastic stages, final."""

    def act(name: str) -> str:
        return "_nre" if name == "relu" else "_nhs"

    stages = [[f"ds_r1_k3_s1_e1_c{space.first_channels}_nre"]] + [[] for _ in space.stages]
    for s, _, spec in space.iter_blocks(arch):
        se = "_se0.25" if spec.se else ""
        expand = arch.expands[s * space.max_depth + len(stages[s + 1])]
        stages[s + 1].append(f"ir_r1_k{spec.kernel}_s{spec.stride}_e{expand}_c{spec.out_c}{se}{act(spec.act)}")
    stages.append([f"cn_r1_k1_s1_c{space.final_expand_channels}{act(space.head_act)}"])
    return stages


def timm_args(space: SearchSpace, arch: Arch) -> dict[str, Any]:
    """JSON arguments of timm's MobileNetV3 for ``arch``; a model folder's config.json records them so that
    timm alone rebuilds the subnet (`timm_model` is the code its model card shows)."""
    return {
        "arch_def": block_strings(space, arch),
        "kwargs": {
            "num_classes": space.num_classes,
            "in_chans": space.in_channels,
            "stem_size": space.stem_channels,
            "fix_stem": True,
            "num_features": space.feature_channels,
            "head_bias": False,
            "drop_rate": space.dropout,
        },
        "act_layer": _timm_act(space.stem_act),
        "se_layer": {"gate_layer": "hard_sigmoid", "force_act_layer": "relu"},
        "stem_stride": space.stem_stride,  # timm's constructor fixes the stem at stride 2
        "head_act_layer": _timm_act(space.head_act),  # timm's head takes the body's activation
    }


def timm_model(args: dict[str, Any]) -> MobileNetV3:
    """A randomly initialised timm MobileNetV3 from `timm_args`."""
    se_layer = partial(
        SqueezeExcite,
        gate_layer=args["se_layer"]["gate_layer"],
        force_act_layer=get_act_layer(args["se_layer"]["force_act_layer"]),
        rd_round_fn=round_channels,
    )
    model = MobileNetV3(
        block_args=decode_arch_def(args["arch_def"]),
        act_layer=get_act_layer(args["act_layer"]),
        se_layer=se_layer,
        round_chs_fn=round_channels,
        **args["kwargs"],
    )
    model.conv_stem.stride = (args["stem_stride"], args["stem_stride"])
    model.act2 = get_act_layer(args["head_act_layer"])(inplace=True)
    return model


def build_subnet(space: SearchSpace, arch: Arch) -> MobileNetV3:
    """A randomly initialised timm MobileNetV3 with exactly the layers of ``arch``."""
    space.validate(arch)
    return timm_model(timm_args(space, arch))
