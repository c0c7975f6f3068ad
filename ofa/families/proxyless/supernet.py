"""The elastic OFA-ProxylessNAS supernet: one set of weights, any subnet of the space active."""

from __future__ import annotations

import torch
from torch import nn

from ofa.families.mbv3.elastic import ElasticMBConv
from ofa.families.mbv3.elastic.net import ElasticMBConvNet
from ofa.families.proxyless.encoding import sample_arch
from ofa.families.proxyless.layers import BN_EPS
from ofa.families.proxyless.space import ProxylessSpace
from ofa.families.proxyless.subnet import build_subnet, timm_args, timm_model


class OFAProxylessNAS(ElasticMBConvNet):
    """Supernet of an elastic ProxylessNAS space.

    The fixed parts (stem, first block, feature mix, classifier) are the very timm modules of the
    largest subnet; the elastic stages are mbv3's `ElasticMBConv` blocks (ReLU6, BN eps 1e-3, no SE)
    whose names mirror timm's ``InvertedResidual``, so ``extract`` is a state-dict copy.
    """

    space_type = ProxylessSpace
    sample_arch = staticmethod(sample_arch)
    timm_args = staticmethod(timm_args)
    timm_model = staticmethod(timm_model)

    def __init__(self, space: ProxylessSpace, num_classes: int | None = None) -> None:
        super().__init__()
        if num_classes is not None and num_classes != space.num_classes:
            space = ProxylessSpace.from_dict({**space.to_dict(), "num_classes": num_classes})
        self.space = space
        skeleton = build_subnet(space, space.max_arch())
        self.conv_stem, self.bn1 = skeleton.conv_stem, skeleton.bn1
        stages: list[nn.Module] = [skeleton.blocks[0]]
        for s in range(space.num_stages):
            blocks = [
                ElasticMBConv(*space.block_io(s, j), space.kernels, space.expands, False, "relu6", bn_eps=BN_EPS)
                for j in range(space.stage_slots(s))
            ]
            stages.append(nn.ModuleList(blocks))
        self.blocks = nn.ModuleList(stages)
        self.conv_head, self.bn2 = skeleton.conv_head, skeleton.bn2
        self.global_pool, self.classifier = skeleton.global_pool, skeleton.classifier
        self.dropout = nn.Dropout(space.dropout)
        self.active_arch = space.max_arch()
        self.set_active(self.active_arch)

    def head(self, x: torch.Tensor) -> torch.Tensor:
        return self.global_pool(self.bn2(self.conv_head(x)))
