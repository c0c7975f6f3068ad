"""Dynamic ops and the elastic bottleneck block of the ResNet supernet."""

from ofa.families.resnet.elastic.block import ElasticBottleneck, ElasticShortcut
from ofa.families.resnet.elastic.ops import ElasticBatchNorm2d, ElasticConvBn, ElasticLinear

__all__ = ["ElasticBatchNorm2d", "ElasticBottleneck", "ElasticConvBn", "ElasticLinear", "ElasticShortcut"]
