"""The elastic MobileNetV3 supernet: one set of weights, any subnet of the space active."""

from __future__ import annotations

import torch
from torch import nn

from ofa.families.mbv3.elastic import ElasticMBConv
from ofa.families.mbv3.elastic.net import ElasticMBConvNet
from ofa.families.mbv3.encoding import sample_arch
from ofa.families.mbv3.space import SearchSpace
from ofa.families.mbv3.subnet import build_subnet, timm_args, timm_model


class OFAMobileNetV3(ElasticMBConvNet):
    """Supernet of an elastic MobileNetV3 space.

    The fixed parts (stem, first block, final expand, head) are the very timm modules of the
    largest subnet; the elastic stages are `ElasticMBConv` blocks whose names mirror timm's, so
    ``extract`` is a state-dict copy.
    """

    space_type = SearchSpace
    sample_arch = staticmethod(sample_arch)
    timm_args = staticmethod(timm_args)
    timm_model = staticmethod(timm_model)

    def __init__(self, space: SearchSpace, num_classes: int | None = None) -> None:
        super().__init__()
        if num_classes is not None and num_classes != space.num_classes:
            space = SearchSpace.from_dict({**space.to_dict(), "num_classes": num_classes})
        self.space = space
        skeleton = build_subnet(space, space.max_arch())
        self.conv_stem, self.bn1 = skeleton.conv_stem, skeleton.bn1
        stages: list[nn.Module] = [skeleton.blocks[0]]
        for s, stage in enumerate(space.stages):
            blocks = []
            for j in range(space.max_depth):
                in_c, out_c, stride = space.block_io(s, j)
                blocks.append(ElasticMBConv(in_c, out_c, stride, space.kernels, space.expands, stage.se, stage.act))
            stages.append(nn.ModuleList(blocks))
        stages.append(skeleton.blocks[-1])
        self.blocks = nn.ModuleList(stages)
        self.global_pool, self.conv_head, self.act2 = skeleton.global_pool, skeleton.conv_head, skeleton.act2
        self.flatten, self.classifier = skeleton.flatten, skeleton.classifier
        self.dropout = nn.Dropout(space.dropout)
        self.active_arch = space.max_arch()
        self.set_active(self.active_arch)

    def head(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks[-1](x)
        return self.flatten(self.act2(self.conv_head(self.global_pool(x))))
