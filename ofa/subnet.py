"""Static subnets: ordinary timm MobileNetV3 models built from an arch of a search space."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import torch
from timm.layers import get_act_layer
from timm.models._efficientnet_blocks import SqueezeExcite
from timm.models._efficientnet_builder import decode_arch_def, round_channels
from timm.models.mobilenetv3 import MobileNetV3
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ofa.arch import Arch
from ofa.errors import OFAError
from ofa.io import load_torch, save_torch
from ofa.space import SearchSpace

SUBNET_FORMAT = "ofa-subnet"


def act_layer(name: str) -> type[nn.Module]:
    return get_act_layer("hard_swish" if name == "hswish" else name)


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


def build_subnet(space: SearchSpace, arch: Arch) -> MobileNetV3:
    """A randomly initialised timm MobileNetV3 with exactly the layers of ``arch``."""
    space.validate(arch)
    model = MobileNetV3(
        block_args=decode_arch_def(block_strings(space, arch)),
        num_classes=space.num_classes,
        in_chans=space.in_channels,
        stem_size=space.stem_channels,
        fix_stem=True,
        num_features=space.feature_channels,
        head_bias=False,
        act_layer=act_layer(space.stem_act),
        se_layer=partial(SqueezeExcite, gate_layer="hard_sigmoid", force_act_layer=nn.ReLU,
                         rd_round_fn=round_channels),
        round_chs_fn=round_channels,
        drop_rate=space.dropout,
    )
    model.conv_stem.stride = (space.stem_stride, space.stem_stride)
    model.act2 = act_layer(space.head_act)(inplace=True)
    return model


def save_subnet(model: nn.Module, space: SearchSpace, arch: Arch, path: str | Path,
                meta: dict[str, Any] | None = None) -> Path:
    """Write a static subnet (config + weights) that `load_subnet` rebuilds without the supernet."""
    return save_torch(path, {
        "format": SUBNET_FORMAT,
        "space": space.to_dict(),
        "arch": arch.to_dict(),
        "state_dict": model.state_dict(),
        "meta": meta or {},
    })


def load_subnet(path: str | Path) -> MobileNetV3:
    """Rebuild a saved static subnet as a plain timm model in eval mode; ``model.ofa_meta`` holds its metadata."""
    obj = load_torch(path, "subnet file")
    if obj.get("format") != SUBNET_FORMAT:
        raise OFAError(f"{path}: not an ofa subnet file (format={obj.get('format')!r})")
    space = SearchSpace.from_dict(obj["space"], f"{path}:space")
    arch = Arch.from_dict(obj["arch"], f"{path}:arch")
    model = build_subnet(space, arch)
    try:
        model.load_state_dict(obj["state_dict"])
    except RuntimeError as exc:
        raise OFAError(f"{path}: weights do not match the stored arch: {str(exc).splitlines()[0]}") from None
    model.ofa_meta = {"space": space, "arch": arch, **obj.get("meta", {})}
    return model.eval()


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
