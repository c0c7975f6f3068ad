"""Dynamic ops and the elastic inverted-residual block of the supernet."""

from ofa.families.mbv3.elastic.block import ElasticMBConv
from ofa.families.mbv3.elastic.ops import (
    ElasticBatchNorm2d,
    ElasticDepthwiseConv2d,
    ElasticPointwiseConv2d,
    ElasticSqueezeExcite,
    kernel_matrices,
)

__all__ = [
    "ElasticBatchNorm2d",
    "ElasticDepthwiseConv2d",
    "ElasticMBConv",
    "ElasticPointwiseConv2d",
    "ElasticSqueezeExcite",
    "kernel_matrices",
]
