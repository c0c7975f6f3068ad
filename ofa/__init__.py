"""ofa: train one elastic MobileNetV3 supernet, search a subnet per device, export it to ONNX."""

from ofa.families.mbv3.arch import Arch
from ofa.families.mbv3.layers import LayerSpec
from ofa.families.mbv3.space import SearchSpace, StageSpec
from ofa.families.mbv3.subnet import build_subnet
from ofa.families.mbv3.supernet import OFAMobileNetV3
from ofa.families.subnet_file import load_subnet, save_subnet
from ofa.train.bn import recalibrate_bn
from ofa.utils.errors import OFAError, SpaceError

__all__ = [
    "Arch",
    "LayerSpec",
    "OFAError",
    "OFAMobileNetV3",
    "SearchSpace",
    "SpaceError",
    "StageSpec",
    "build_subnet",
    "load_subnet",
    "recalibrate_bn",
    "save_subnet",
]
