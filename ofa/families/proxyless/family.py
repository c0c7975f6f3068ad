"""The OFA-ProxylessNAS family's ``Family`` record: what the registry knows of it."""

from __future__ import annotations

from ofa.families.family import Family
from ofa.families.mbv3.official_shapes import ImportConfig
from ofa.families.mbv3.transfer import adapt_supernet, derive_space
from ofa.families.proxyless.arch import FAMILY, ProxylessArch
from ofa.families.proxyless.encoding import ArchEncoder, GeneLayout, sample_arch
from ofa.families.proxyless.hub import PROXYLESS_FOLDER
from ofa.families.proxyless.layers import LayerSpec, layer_module
from ofa.families.proxyless.official import import_official, matches
from ofa.families.proxyless.space import ProxylessSpace
from ofa.families.proxyless.subnet import build_subnet, timm_args, timm_model
from ofa.families.proxyless.supernet import OFAProxylessNAS

PROXYLESS = Family(
    name=FAMILY,
    space_type=ProxylessSpace,
    presets={FAMILY: ProxylessSpace.preset},  # `--space proxyless`: the published w1.3 space
    arch_type=ProxylessArch,
    official_arch=lambda space, config, source: ProxylessArch.from_ofa_config(config, source=source),
    supernet_type=OFAProxylessNAS,
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
    import_config=ImportConfig,  # the same flags as OFA-MBv3's: elastic MBConv choice lists and transfer surgery
    timm_folder=PROXYLESS_FOLDER,
    derive_space=derive_space,
    adapt_supernet=adapt_supernet,
)
