"""Additive per-layer costs (latency, MACs, params) as dense arrays, evaluated for whole populations.

Every cost the search constrains is a sum over the layers a subnet runs. Block costs depend only on
(resolution, slot, kernel, expand), so a population's costs are one gather and one masked sum.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ofa.families.mbv3.arch import Arch
from ofa.families.mbv3.encoding import GeneLayout
from ofa.families.mbv3.layers import LayerSpec
from ofa.families.mbv3.space import SearchSpace


class DenseCost:
    """cost(arch) = fixed[r] + Σ over active slots of block[r, slot, kernel, expand]."""

    def __init__(self, space: SearchSpace, fixed: np.ndarray, block: np.ndarray) -> None:
        shape = (len(space.resolutions), space.num_slots, len(space.kernels), len(space.expands))
        if fixed.shape != shape[:1] or block.shape != shape:
            raise ValueError(f"dense cost arrays of shape {fixed.shape}, {block.shape} do not fit the space {shape}")
        self.space, self.fixed, self.block = space, fixed, block
        self.layout = GeneLayout.of(space)
        self._slots = np.arange(space.num_slots)[None, :]

    @classmethod
    def from_layer_cost(
        cls, space: SearchSpace, cost: Callable[[LayerSpec], float], overhead: float = 0.0
    ) -> DenseCost:
        """Tabulate ``cost(layer)`` for every layer config of the space (plus a per-network ``overhead``)."""
        fixed = np.array(
            [overhead + sum(cost(layer) for layer in space.fixed_layers(r)) for r in space.resolutions],
            dtype=np.float64,
        )
        block = np.zeros((len(space.resolutions), space.num_slots, len(space.kernels), len(space.expands)))
        for ri, r in enumerate(space.resolutions):
            for s in range(space.num_stages):
                for j in range(space.max_depth):
                    for ki, k in enumerate(space.kernels):
                        for ei, e in enumerate(space.expands):
                            block[ri, s * space.max_depth + j, ki, ei] = cost(space.block_spec(r, s, j, k, e))
        return cls(space, fixed, block)

    def predict_batch(self, rows: np.ndarray) -> np.ndarray:
        """Costs of a population given as gene rows (see ``ofa.families.mbv3.encoding.GeneLayout``)."""
        lay = self.layout
        rows = lay.as_rows(rows)
        r = rows[:, lay.resolution]
        costs = self.block[r[:, None], self._slots, rows[:, lay.slices["kernels"]], rows[:, lay.slices["expands"]]]
        return self.fixed[r] + np.where(lay.active_slots(rows), costs, 0.0).sum(axis=1)

    def predict(self, arch: Arch) -> float:
        return float(self.predict_batch(self.layout.encode(arch))[0])


def macs_model(space: SearchSpace) -> DenseCost:
    return DenseCost.from_layer_cost(space, lambda layer: layer.macs)


def params_model(space: SearchSpace) -> DenseCost:
    return DenseCost.from_layer_cost(space, lambda layer: layer.params)
