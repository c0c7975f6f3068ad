"""The OFA-ResNet50 family's ``Family`` record: what the registry knows of it."""

from __future__ import annotations

from ofa.families.family import Family, TimmFolder
from ofa.families.resnet.arch import ResNetArch
from ofa.families.resnet.encoding import ArchEncoder, GeneLayout, sample_arch
from ofa.families.resnet.layers import LayerSpec, layer_module
from ofa.families.resnet.official import ImportConfig, import_official, matches
from ofa.families.resnet.space import ResNetSpace
from ofa.families.resnet.subnet import TIMM_SNIPPET, build_subnet, timm_args, timm_model
from ofa.families.resnet.supernet import OFAResNet
from ofa.families.resnet.transfer import adapt_supernet, derive_space

RESNET_FOLDER = TimmFolder(
    key="timm_byobnet",
    architecture="resnet_ofa_subnet",
    holds="ByobNet block and model arguments, and whether the stem's residual block runs",
    snippet=TIMM_SNIPPET,  # timm's constructor, then the one-line stem patch (subnet.STEM_PATCH)
    first_conv="stem.conv1.conv",
    classifier="head.fc",
    num_features=lambda model: model.num_features,  # the last stage's width, an arch gene
)

RESNET = Family(
    name="resnet",
    space_type=ResNetSpace,
    presets={"ofa_resnet50": ResNetSpace.ofa_resnet50},
    arch_type=ResNetArch,
    official_arch=ResNetSpace.official_arch,
    supernet_type=OFAResNet,
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
    timm_folder=RESNET_FOLDER,
    derive_space=derive_space,
    adapt_supernet=adapt_supernet,
)
