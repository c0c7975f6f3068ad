"""The standalone module a latency table times for one mbv3 layer config: cut out of a real timm subnet.

Layers are measured exactly as they run in an exported subnet, so each module is taken from a
subnet built by ``ofa.families.mbv3.subnet.build_subnet`` (one per kernel/expand pair, every stage at
full depth: it holds a module for every block slot at every resolution, weights not depending on it).
"""

from __future__ import annotations

from functools import lru_cache

from torch import nn

from ofa.families.mbv3.layers import LayerSpec, mid_channels
from ofa.families.mbv3.space import SearchSpace
from ofa.families.mbv3.subnet import build_subnet
from ofa.utils.errors import SpaceError


class _Cutter:
    """The subnets of one space that the layer modules are cut out of, built on first use."""

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self._models: dict[tuple[int, int], nn.Module] = {}

    def model(self, kernel: int, expand: int) -> nn.Module:
        if (kernel, expand) not in self._models:
            sp = self.space
            arch = sp.uniform_arch(sp.resolutions[0], kernel, expand, sp.max_depth)
            self._models[kernel, expand] = build_subnet(sp, arch).eval()
        return self._models[kernel, expand]

    def block_place(self, spec: LayerSpec) -> tuple[int, int, int]:
        """(stage, index, expand ratio) of a block slot running ``spec`` (any with its widths and stride)."""
        sp = self.space
        for s, stage in enumerate(sp.stages):
            for j in range(sp.max_depth):
                if sp.block_io(s, j) != (spec.in_c, spec.out_c, spec.stride) or (stage.se, stage.act) != (
                    spec.se,
                    spec.act,
                ):
                    continue
                for e in sp.expands:
                    if mid_channels(spec.in_c, e) == spec.mid:
                        return s, j, e
        raise SpaceError(f"layer {spec.key} is not a block of space {sp.fingerprint()}")


@lru_cache(maxsize=16)
def _cutter(space: SearchSpace) -> _Cutter:
    return _Cutter(space)


def layer_module(space: SearchSpace, spec: LayerSpec) -> nn.Module:
    """The timm module running ``spec`` in subnets of ``space``."""
    cut = _cutter(space)
    any_model = cut.model(space.kernels[0], space.expands[0])
    if spec.kind == "stem":
        return nn.Sequential(any_model.conv_stem, any_model.bn1)
    if spec.kind == "first":
        return any_model.blocks[0]
    if spec.kind == "final_expand":
        return any_model.blocks[-1]
    if spec.kind == "head":
        m = any_model
        return nn.Sequential(m.global_pool, m.conv_head, m.norm_head, m.act2, m.flatten, m.classifier)
    stage, index, expand = cut.block_place(spec)
    return cut.model(spec.kernel, expand).blocks[stage + 1][index]
