"""Official once-for-all OFA-MobileNetV3 checkpoints ↔ our supernet, weight for weight.

The official code (mit-han-lab/once-for-all) computes what our elastic blocks compute: the same
prefix channel slices, the same 7→5→3 centre-crop-and-matrix kernel chain, SE width
``make_divisible(mid // 4)``, hswish/hsigmoid via relu6, BN eps 1e-5 / momentum 0.1, the feature
mix 1×1 conv without BN or bias. Only names differ, so import is a key map plus a space inferred
from the tensor shapes. The space records the widths exactly as found, at width multiplier 1, so
any multiplier the official code builds round-trips without re-deriving its rounding.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ofa.families.mbv3.official_shapes import (
    ImportConfig,
    canonical_key,
    canonical_state,
    kernel_set,
    max_expand,
    paper_choices,
    shape,
)
from ofa.families.mbv3.space import SearchSpace, StageSpec
from ofa.families.mbv3.supernet import OFAMobileNetV3
from ofa.families.mbv3.transfer import fold_input_channels, rehead
from ofa.families.supernet_file import finish_import, load_by_key_map, read_official_state
from ofa.utils.errors import OFAError

# The paper's OFA-MobileNetV3 skeleton: what shapes cannot tell.
OFFICIAL_STAGES = 5
OFFICIAL_STRIDES = (2, 2, 2, 1, 2)
OFFICIAL_ACTS = ("relu", "relu", "hswish", "hswish", "hswish")
PAPER_EXPANDS = (3, 4, 6)
PAPER_DEPTHS = (2, 3, 4)
PAPER_RESOLUTIONS = tuple(range(128, 225, 4))

_BN = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")
# Elastic block (blocks.N, N >= 1): official canonical suffix → ours.
_BLOCK = {
    "inverted_bottleneck.conv.weight": "conv_pw.weight",
    "depth_conv.conv.weight": "conv_dw.weight",
    "point_linear.conv.weight": "conv_pwl.weight",
    **{f"depth_conv.se.fc.{o}.{p}": f"se.conv_{o}.{p}" for o in ("reduce", "expand") for p in ("weight", "bias")},
    **{
        f"{o}.bn.{b}": f"{u}.{b}"
        for o, u in (("inverted_bottleneck", "bn1"), ("depth_conv", "bn2"), ("point_linear", "bn3"))
        for b in _BN
    },
}
_BLOCK_KEY = re.compile(r"^blocks\.(\d+)\.conv\.(.+)$")
_LANDMARKS = ("first_conv.conv.weight", "final_expand_layer.conv.weight", "feature_mix_layer.conv.weight")


def _fixed_map(final: int) -> dict[str, str]:
    """Official canonical key → ours for the parts every subnet runs (``final``: our final block index)."""
    out = {
        "first_conv.conv.weight": "conv_stem.weight",
        "blocks.0.conv.depth_conv.conv.weight": "blocks.0.0.conv_dw.weight",
        "blocks.0.conv.point_linear.conv.weight": "blocks.0.0.conv_pw.weight",
        "final_expand_layer.conv.weight": f"blocks.{final}.0.conv.weight",
        "feature_mix_layer.conv.weight": "conv_head.weight",
        "classifier.linear.weight": "classifier.weight",
        "classifier.linear.bias": "classifier.bias",
    }
    bns = (
        ("first_conv", "bn1"),
        ("blocks.0.conv.depth_conv", "blocks.0.0.bn1"),
        ("blocks.0.conv.point_linear", "blocks.0.0.bn2"),
        ("final_expand_layer", f"blocks.{final}.0.bn1"),
    )
    for official, ours in bns:
        out.update({f"{official}.bn.{b}": f"{ours}.{b}" for b in _BN})
    return out


def official_key_map(space: SearchSpace) -> dict[str, str]:
    """Official canonical key → our supernet key, for every tensor of ``space``'s supernet."""
    d, final = space.max_depth, space.num_stages + 1
    out = _fixed_map(final)
    for s, stage in enumerate(space.stages):
        for j in range(d):
            pre, ours = f"blocks.{1 + s * d + j}.conv.", f"blocks.{s + 1}.{j}."
            out.update({pre + o: ours + u for o, u in _BLOCK.items() if stage.se or ".se." not in o})
            kernels = sorted(space.kernels, reverse=True)
            out.update(
                {
                    f"{pre}depth_conv.conv.{a}to{b}_matrix": f"{ours}conv_dw.transforms.{a}to{b}"
                    for a, b in itertools.pairwise(kernels)
                }
            )
    return out


def read_official(path: str | Path) -> dict[str, torch.Tensor]:
    """The state dict of an official checkpoint, canonical names, floats as fp32 (fp16 files too)."""
    out = canonical_state(read_official_state(path), path)
    missing = [k for k in _LANDMARKS if k not in out]
    if missing or not any(_BLOCK_KEY.match(k) for k in out):
        sample = ", ".join(sorted(out)[:3])
        raise OFAError(
            f"{path}: not an OFA-MobileNetV3 checkpoint (no {missing[0] if missing else 'blocks.N.conv.*'}"
            f"; found {sample}, ...)"
        )
    return out


def matches(state: Mapping[str, Any]) -> bool:
    """Whether an official state dict (any key naming) is an OFA-MobileNetV3's: its landmark tensors are there."""
    names = {canonical_key(str(k)) for k in state}
    return all(k in names for k in _LANDMARKS) and any(_BLOCK_KEY.match(k) for k in names)


def infer_space(
    state: Mapping[str, torch.Tensor],
    source: str,
    expands: tuple[int, ...] | None = None,
    depths: tuple[int, ...] | None = None,
) -> SearchSpace:
    """The space an official checkpoint was built for, from its tensor shapes alone."""
    numbers = sorted({int(m[1]) for k in state if (m := _BLOCK_KEY.match(k))} - {0})
    if numbers != list(range(1, len(numbers) + 1)) or not numbers or len(numbers) % OFFICIAL_STAGES:
        raise OFAError(
            f"{source}: {len(numbers)} elastic blocks (blocks.1..N); OFA-MobileNetV3 has "
            f"{OFFICIAL_STAGES} stages of equally many"
        )
    if "blocks.0.conv.inverted_bottleneck.conv.weight" in state:
        raise OFAError(f"{source}: blocks.0 has an expand conv; OFA-MobileNetV3's first block has none")
    max_depth = len(numbers) // OFFICIAL_STAGES
    stem = shape(state, "first_conv.conv.weight", source, 4)
    first = shape(state, "blocks.0.conv.point_linear.conv.weight", source, 4)
    stages = tuple(
        StageSpec(
            shape(state, f"blocks.{1 + s * max_depth}.conv.point_linear.conv.weight", source, 4)[0],
            OFFICIAL_STRIDES[s],
            f"blocks.{1 + s * max_depth}.conv.depth_conv.se.fc.reduce.weight" in state,
            OFFICIAL_ACTS[s],
        )
        for s in range(OFFICIAL_STAGES)
    )
    return SearchSpace(
        stages=stages,
        kernels=kernel_set(state, source),
        expands=paper_choices(max_expand(state, source, len(numbers)), expands, PAPER_EXPANDS, "expands"),
        depths=paper_choices(max_depth, depths, PAPER_DEPTHS, "depths"),
        resolutions=PAPER_RESOLUTIONS,
        stem_width=stem[0],
        first_width=first[0],
        final_expand_width=shape(state, "final_expand_layer.conv.weight", source, 4)[0],
        feature_width=shape(state, "feature_mix_layer.conv.weight", source, 4)[0],
        in_channels=stem[1],
        num_classes=shape(state, "classifier.linear.weight", source, 2)[0],
    )


def load_official_weights(net: OFAMobileNetV3, state: Mapping[str, torch.Tensor], source: str) -> OFAMobileNetV3:
    """Copy every official tensor into ``net``: each key known, none missing, every shape equal."""
    return load_by_key_map(net, state, official_key_map(net.space), source, "an OFA-MobileNetV3")


def check_official_layout(space: SearchSpace) -> None:
    """Raise unless ``space`` is one the official OFAMobileNetV3 class can build (any widths/choices)."""
    problems = [
        (space.num_stages == OFFICIAL_STAGES, f"{space.num_stages} stages instead of {OFFICIAL_STAGES}"),
        (tuple(s.stride for s in space.stages) == OFFICIAL_STRIDES, "stage strides differ from the paper's"),
        (tuple(s.act for s in space.stages) == OFFICIAL_ACTS, "stage activations differ from the paper's"),
        (
            (space.stem_stride, space.stem_act, space.head_act) == (2, "hswish", "hswish"),
            "stem stride/activation or head activation differ from the paper's",
        ),
    ]
    bad = next((why for ok, why in problems if not ok), None)
    if bad:
        raise OFAError(f"space cannot be written in the official OFA-MobileNetV3 layout: {bad}")


def _official_name(key: str) -> str:
    """Canonical → the names today's official code writes (dynamic layers nest ``.bn.bn.``/``.conv.conv.``)."""
    m = _BLOCK_KEY.match(key)
    if not m or m[1] == "0":
        return key
    rest = m[2].replace(".bn.", ".bn.bn.")
    rest = re.sub(r"^(inverted_bottleneck|depth_conv|point_linear)\.conv\.weight$", r"\1.conv.conv.weight", rest)
    return f"blocks.{m[1]}.conv.{rest}"


def to_official_state(net: OFAMobileNetV3) -> dict[str, torch.Tensor]:
    """Our supernet's weights under the official checkpoint's names (``torch.save({"state_dict": ...})``)."""
    check_official_layout(net.space)
    ours = net.state_dict()
    return {
        _official_name(official): ours[mine].detach().clone() for official, mine in official_key_map(net.space).items()
    }


def import_official(path: str | Path, config: ImportConfig | None = None) -> OFAMobileNetV3:
    """Our supernet computing what the official checkpoint at ``path`` computes (then the transfer surgery).

    ``net.meta`` carries the official preprocessing and where the weights came from; its BN
    statistics are the supernet's, so each subnet needs BN recalibration before it is deployed.
    """
    config = config or ImportConfig()
    source = str(path)
    state = read_official(path)
    space = infer_space(state, source, config.expands, config.depths)
    net = load_official_weights(OFAMobileNetV3(space), state, source)
    return finish_import(net, path, "OFAMobileNetV3", config, fold_input_channels, rehead)
