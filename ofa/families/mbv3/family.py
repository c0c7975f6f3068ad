"""The elastic MobileNetV3 family's ``Family`` record: what the registry knows of it."""

from __future__ import annotations

from ofa.families.family import Family
from ofa.families.mbv3.arch import Arch
from ofa.families.mbv3.encoding import ArchEncoder, GeneLayout, sample_arch
from ofa.families.mbv3.hub import MBV3_FOLDER
from ofa.families.mbv3.layer_modules import layer_module
from ofa.families.mbv3.layers import LayerSpec
from ofa.families.mbv3.official import ImportConfig, import_official, matches
from ofa.families.mbv3.space import SearchSpace
from ofa.families.mbv3.subnet import build_subnet, timm_args, timm_model
from ofa.families.mbv3.supernet import OFAMobileNetV3
from ofa.families.mbv3.transfer import adapt_supernet, derive_space

MBV3 = Family(
    name="mbv3",
    space_type=SearchSpace,
    presets={"mbv3": SearchSpace.mbv3},
    arch_type=Arch,
    official_arch=lambda space, config, source: Arch.from_ofa_config(config, source=source),
    supernet_type=OFAMobileNetV3,
    layer_type=LayerSpec,
    layout=GeneLayout.of,
    encoder=ArchEncoder,
    sample_arch=sample_arch,
    build_subnet=build_subnet,
    timm_args=timm_args,
    timm_model=timm_model,
    layer_module=layer_module,
    official_matches=matches,
    official_import=import_official,
    import_config=ImportConfig,
    timm_folder=MBV3_FOLDER,
    derive_space=derive_space,
    adapt_supernet=adapt_supernet,
)
