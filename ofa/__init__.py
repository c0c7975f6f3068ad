"""ofa: train one elastic MobileNetV3 supernet, search a subnet per device, export it to ONNX."""

from ofa.arch import Arch
from ofa.bn import recalibrate_bn
from ofa.errors import OFAError, SpaceError
from ofa.layers import LayerSpec
from ofa.space import SearchSpace, StageSpec
from ofa.subnet import build_subnet, load_subnet, save_subnet
from ofa.supernet import OFAMobileNetV3

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
