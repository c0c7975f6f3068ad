"""How a model folder describes an OFA-ProxylessNAS subnet: timm's EfficientNet from arch-definition strings."""

from __future__ import annotations

from ofa.families.family import TimmFolder

# What the card shows a timm user; tests run exactly these lines, in the folder, without ofa installed.
SNIPPET = """\
import json
from functools import partial

import torch
from safetensors.torch import load_file
from timm.layers import get_act_layer
from timm.models._efficientnet_builder import decode_arch_def, round_channels
from timm.models.efficientnet import EfficientNet

a = json.load(open("{config}"))["{key}"]
model = EfficientNet(block_args=decode_arch_def(a["arch_def"]), act_layer=get_act_layer(a["act_layer"]),
                     norm_layer=partial(torch.nn.BatchNorm2d, eps=a["bn_eps"]), round_chs_fn=round_channels,
                     **a["kwargs"])
model.conv_stem.stride = (a["stem_stride"], a["stem_stride"])  # timm's constructor fixes stride 2
model.load_state_dict(load_file("{weights}"))
model.eval()
"""

PROXYLESS_FOLDER = TimmFolder(
    key="timm_efficientnet",
    architecture="proxylessnas_ofa_subnet",
    holds="arch-definition strings and EfficientNet arguments",
    snippet=SNIPPET,
    first_conv="conv_stem",
    classifier="classifier",
    num_features=lambda model: model.num_features,  # the feature-mix width, which the classifier reads
)
