from dataclasses import replace

import numpy as np
import pytest

from ofa.families.mbv3.encoding import GeneLayout, sample_arch
from ofa.families.mbv3.space import SearchSpace
from search.dense import DenseCost, macs_model, params_model


@pytest.mark.parametrize("make_space", [SearchSpace.mbv3, lambda: replace(SearchSpace.mbv3(), width_mult=1.2)])
def test_dense_costs_equal_the_layer_sums(make_space, rng):
    space = make_space()
    macs, params = macs_model(space), params_model(space)
    layout = GeneLayout.of(space)
    rows = layout.sample(300, rng)
    got_macs, got_params = macs.predict_batch(rows), params.predict_batch(rows)
    for i, row in enumerate(rows):
        arch = layout.decode(row)
        assert got_macs[i] == space.macs(arch)
        assert got_params[i] == space.params(arch)
    assert macs.predict(space.min_arch()) == min(space.macs(space.min_arch(r)) for r in space.resolutions)


def test_unused_slots_do_not_count(space):
    cost = DenseCost.from_layer_cost(space, lambda layer: 1.0 if layer.kind == "mbconv" else 0.0, overhead=0.5)
    arch = sample_arch(space, 0)
    assert cost.predict(arch) == sum(arch.depths) + 0.5


def test_shape_mismatch_is_rejected(space):
    with pytest.raises(ValueError, match="do not fit the space"):
        DenseCost(space, np.zeros(2), np.zeros((3, space.num_slots, 3, 3)))
