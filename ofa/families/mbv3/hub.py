"""How a model folder describes an mbv3 subnet: timm's MobileNetV3, rebuilt from its arch-definition strings."""

from __future__ import annotations

from ofa.families.family import TimmFolder

# What the card shows a timm user; tests run exactly these lines, in the folder, without ofa installed.
SNIPPET = """\
import json
from functools import partial

from safetensors.torch import load_file
from timm.layers import get_act_layer
from timm.models._efficientnet_blocks import SqueezeExcite
from timm.models._efficientnet_builder import decode_arch_def, round_channels
from timm.models.mobilenetv3 import MobileNetV3

a = json.load(open("{config}"))["{key}"]
se = partial(SqueezeExcite, gate_layer=a["se_layer"]["gate_layer"],
             force_act_layer=get_act_layer(a["se_layer"]["force_act_layer"]), rd_round_fn=round_channels)
model = MobileNetV3(block_args=decode_arch_def(a["arch_def"]), act_layer=get_act_layer(a["act_layer"]),
                    se_layer=se, round_chs_fn=round_channels, **a["kwargs"])
model.conv_stem.stride = (a["stem_stride"], a["stem_stride"])  # timm's constructor fixes stride 2
model.act2 = get_act_layer(a["head_act_layer"])(inplace=True)  # timm's head reuses the body's activation
model.load_state_dict(load_file("{weights}"))
model.eval()
"""

MBV3_FOLDER = TimmFolder(
    key="timm_mobilenetv3",
    architecture="mobilenetv3_ofa_subnet",
    holds="arch-definition strings and MobileNetV3 arguments",
    snippet=SNIPPET,
    first_conv="conv_stem",
    classifier="classifier",
    num_features=lambda model: model.head_hidden_size,  # the conv head's width (timm's num_features is its input)
)
