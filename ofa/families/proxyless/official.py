"""Official once-for-all OFA-ProxylessNAS checkpoints ↔ our supernet, weight for weight.

The official ``OFAProxylessNASNets`` (mit-han-lab/once-for-all) computes what our supernet computes:
the same prefix channel slices and 7→5→3 kernel chain as OFA-MBv3 (mbv3's elastic blocks), ReLU6,
BN eps 1e-3, no SE, a feature-mix conv with BN before pooling. Only names differ, so import is a key
map plus a space inferred from the tensor shapes; widths are recorded exactly as found, at width
multiplier 1, so any multiplier the official code builds round-trips.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ofa.families.mbv3.official import PAPER_DEPTHS, PAPER_EXPANDS
from ofa.families.mbv3.official_shapes import (
    ImportConfig,
    canonical_key,
    canonical_state,
    kernel_set,
    max_expand,
    paper_choices,
    shape,
)
from ofa.families.mbv3.transfer import fold_input_channels, rehead
from ofa.families.proxyless.space import PAPER_RESOLUTIONS, ProxylessSpace, StageSpec
from ofa.families.proxyless.supernet import OFAProxylessNAS
from ofa.families.supernet_file import finish_import, load_by_key_map, read_official_state
from ofa.utils.errors import OFAError

# The official skeleton: what shapes cannot tell.
OFFICIAL_STRIDES = (2, 2, 2, 1, 2, 1)
_ELASTIC_STAGES = len(OFFICIAL_STRIDES) - 1  # stages of max_depth blocks; the last has one
_BN = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")
_BLOCK_KEY = re.compile(r"^blocks\.(\d+)\.conv\.")
# Elastic block (blocks.N, N >= 1): official canonical suffix → ours (timm's InvertedResidual names).
_BLOCK = {
    "inverted_bottleneck.conv.weight": "conv_pw.weight",
    "depth_conv.conv.weight": "conv_dw.weight",
    "point_linear.conv.weight": "conv_pwl.weight",
    **{
        f"{o}.bn.{b}": f"{u}.{b}"
        for o, u in (("inverted_bottleneck", "bn1"), ("depth_conv", "bn2"), ("point_linear", "bn3"))
        for b in _BN
    },
}
_FIXED = {
    "first_conv.conv.weight": "conv_stem.weight",
    "blocks.0.conv.depth_conv.conv.weight": "blocks.0.0.conv_dw.weight",
    "blocks.0.conv.point_linear.conv.weight": "blocks.0.0.conv_pw.weight",
    "feature_mix_layer.conv.weight": "conv_head.weight",
    "classifier.linear.weight": "classifier.weight",
    "classifier.linear.bias": "classifier.bias",
    **{
        f"{official}.bn.{b}": f"{ours}.{b}"
        for official, ours in (
            ("first_conv", "bn1"),
            ("blocks.0.conv.depth_conv", "blocks.0.0.bn1"),
            ("blocks.0.conv.point_linear", "blocks.0.0.bn2"),
            ("feature_mix_layer", "bn2"),
        )
        for b in _BN
    },
}


def matches(state_dict: Mapping[str, Any]) -> bool:
    """Whether a state dict (official names, any version) is an OFA-ProxylessNAS one, by its keys alone.

    OFA-MBv3 has a final expand layer and no BN in its feature mix; OFA-ResNet has no ``first_conv``.
    """
    keys = {canonical_key(str(k)) for k in state_dict}
    present = (
        "first_conv.conv.weight",
        "blocks.0.conv.depth_conv.conv.weight",
        "blocks.1.conv.inverted_bottleneck.conv.weight",
        "feature_mix_layer.bn.weight",
    )
    absent = ("final_expand_layer.conv.weight", "blocks.0.conv.inverted_bottleneck.conv.weight")
    return all(k in keys for k in present) and not any(k in keys for k in absent)


def read_official(path: str | Path) -> dict[str, torch.Tensor]:
    """The state dict of an official OFA-ProxylessNAS checkpoint, canonical names, floats as fp32."""
    state = read_official_state(path)
    if not matches(state):
        raise OFAError(
            f"{path}: not an OFA-ProxylessNAS checkpoint (no first_conv, first block, feature-mix BN and elastic "
            f"blocks of OFAProxylessNASNets; found {', '.join(sorted(map(str, state))[:3])}, ...)"
        )
    return canonical_state(state, path)


def official_key_map(space: ProxylessSpace) -> dict[str, str]:
    """Official canonical key → our supernet key, for every tensor of ``space``'s supernet."""
    out = dict(_FIXED)
    kernels = sorted(space.kernels, reverse=True)
    for s in range(space.num_stages):
        for j in range(space.stage_slots(s)):
            pre, ours = f"blocks.{1 + space.slot(s, j)}.conv.", f"blocks.{s + 1}.{j}."
            out.update({pre + o: ours + u for o, u in _BLOCK.items()})
            out.update(
                {
                    f"{pre}depth_conv.conv.{a}to{b}_matrix": f"{ours}conv_dw.transforms.{a}to{b}"
                    for a, b in itertools.pairwise(kernels)
                }
            )
    return out


def infer_space(
    state: Mapping[str, torch.Tensor],
    source: str,
    expands: tuple[int, ...] | None = None,
    depths: tuple[int, ...] | None = None,
) -> ProxylessSpace:
    """The space an official checkpoint was built for, from its tensor shapes alone."""
    numbers = sorted({int(m[1]) for k in state if (m := _BLOCK_KEY.match(k))} - {0})
    n = len(numbers)
    if numbers != list(range(1, n + 1)) or n <= _ELASTIC_STAGES or (n - 1) % _ELASTIC_STAGES:
        raise OFAError(
            f"{source}: {n} elastic blocks (blocks.1..N); OFA-ProxylessNAS has {_ELASTIC_STAGES} stages of "
            f"equally many plus one block"
        )
    max_depth = (n - 1) // _ELASTIC_STAGES
    firsts = [1 + s * max_depth for s in range(_ELASTIC_STAGES)] + [n]
    stem = shape(state, "first_conv.conv.weight", source, 4)
    stages = tuple(
        StageSpec(shape(state, f"blocks.{b}.conv.point_linear.conv.weight", source, 4)[0], stride)
        for b, stride in zip(firsts, OFFICIAL_STRIDES)
    )
    return ProxylessSpace(
        stages=stages,
        kernels=kernel_set(state, source),
        expands=paper_choices(max_expand(state, source, n), expands, PAPER_EXPANDS, "expands"),
        depths=paper_choices(max_depth, depths, PAPER_DEPTHS, "depths"),
        resolutions=PAPER_RESOLUTIONS,
        stem_width=stem[0],
        first_width=shape(state, "blocks.0.conv.point_linear.conv.weight", source, 4)[0],
        feature_width=shape(state, "feature_mix_layer.conv.weight", source, 4)[0],
        in_channels=stem[1],
        num_classes=shape(state, "classifier.linear.weight", source, 2)[0],
    )


def load_official_weights(net: OFAProxylessNAS, state: Mapping[str, torch.Tensor], source: str) -> OFAProxylessNAS:
    """Copy every official tensor into ``net``: each key known, none missing, every shape equal."""
    return load_by_key_map(net, state, official_key_map(net.space), source, "an OFA-ProxylessNAS")


def import_official(path: str | Path, config: ImportConfig | None = None) -> OFAProxylessNAS:
    """Our supernet computing what the official checkpoint at ``path`` computes (then the transfer surgery).

    ``net.meta`` carries the official preprocessing and where the weights came from; its BN
    statistics are the supernet's, so each subnet needs BN recalibration before it is deployed.
    """
    config = config or ImportConfig()
    source = str(path)
    state = read_official(path)
    space = infer_space(state, source, config.expands, config.depths)
    net = load_official_weights(OFAProxylessNAS(space), state, source)
    return finish_import(net, path, "OFAProxylessNASNets", config, fold_input_channels, rehead)
