"""The gene encoding: round trips, OFA's random operators, predictor features, and one layout for every user."""

from dataclasses import replace

import numpy as np
import pytest
from helpers import tiny_space

from ofa.families.mbv3 import encoding
from ofa.families.mbv3.encoding import ArchEncoder, GeneLayout, sample_arch
from ofa.utils.errors import OFAError
from search.dense import DenseCost, macs_model
from search.evolution import SubsetPredictor, cheapest_rows, cost_models, run_search
from search.predictor.model import AccuracyPredictor
from search.search_config import EvolutionConfig, SearchConfig


def test_seeded_sampling_is_reproducible(space):
    assert [sample_arch(space, 7) for _ in range(3)] == [sample_arch(space, 7)] * 3
    a, b = np.random.default_rng(1), np.random.default_rng(1)
    assert [sample_arch(space, a) for _ in range(5)] == [sample_arch(space, b) for _ in range(5)]
    archs = {sample_arch(space, i) for i in range(50)}
    assert len(archs) == 50
    restricted = [sample_arch(space, i, kernels=[7], expands=[4], depths=[3]) for i in range(10)]
    assert all(set(a.kernels) == {7} and set(a.expands) == {4} and set(a.depths) == {3} for a in restricted)


def test_encoding_round_trip_and_genetic_ops(space, rng):
    layout = GeneLayout.of(space)
    rows = layout.sample(200, rng)
    assert (rows >= 0).all() and (rows < layout.sizes).all()
    for row in rows[:20]:
        arch = layout.decode(row)
        space.validate(arch)
        assert (layout.encode(arch) == row).all()
    parent, other = sample_arch(space, 1), sample_arch(space, 2)
    pair = layout.encode_many([parent, other])
    child = layout.decode(layout.crossover(pair[:1], pair[1:], np.random.default_rng(0))[0])
    for name in ("depths", "kernels", "expands"):
        assert all(c in (p, o) for c, p, o in zip(getattr(child, name), getattr(parent, name), getattr(other, name)))
    mutants = [layout.decode(layout.mutate(pair[:1], np.random.default_rng(i), prob=0.1)[0]) for i in range(200)]
    changed = np.mean([m.kernels[0] != parent.kernels[0] for m in mutants])
    assert 0.02 < changed < 0.15  # redraw with p=0.1, 2/3 of redraws change the value
    assert all(space.validate(m) for m in mutants)


def test_layout_is_built_once_per_space(space):
    assert GeneLayout.of(space) is GeneLayout.of(replace(space))
    assert GeneLayout.of(space) is not GeneLayout.of(replace(space, resolutions=(12, 16)))
    with pytest.raises(ValueError, match="read-only"):
        GeneLayout.of(space).sizes[0] = 9


def test_encoder_round_trip(space, rng):
    layout = GeneLayout.of(space)
    enc = ArchEncoder(space)
    assert enc.dim == space.num_slots * (len(space.kernels) + len(space.expands)) + len(space.resolutions)
    rows = layout.sample(200, rng)
    feats = enc.encode_rows(rows)
    assert feats.dtype == np.float32 and set(np.unique(feats)) == {0.0, 1.0}
    # two ones per active slot (kernel, expand) and one for the resolution; skipped slots are all zeros
    assert np.array_equal(feats.sum(1), 2 * layout.active_slots(rows).sum(1) + 1)
    archs = enc.decode(feats)
    assert np.array_equal(enc.encode(archs), feats)
    for row, arch in zip(rows, archs):
        orig = layout.decode(row)
        assert (arch.resolution, arch.depths) == (orig.resolution, orig.depths)
        assert space.layers(arch) == space.layers(orig)  # the same subnet
    assert np.array_equal(enc.encode(space.max_arch()), enc.encode_rows(layout.encode(space.max_arch())))
    bad = feats[:1].copy()
    bad[0, : enc.per_slot] = 0  # slot 0 of stage 0 skipped while later slots run
    with pytest.raises(OFAError, match="stage 0"):
        enc.decode(bad)


@pytest.fixture
def reordered(monkeypatch):
    """A space of its own whose layout puts the gene groups in another column order.

    Caches of layouts and of what is built on them are emptied afterwards, so no other test sees them.
    """
    monkeypatch.setattr(encoding, "GENE_ORDER", ("kernels", "depths", "expands", "resolution"))
    encoding._layout.cache_clear()
    yield tiny_space(num_classes=7)
    encoding._layout.cache_clear()
    cost_models.cache_clear()


def layer_ms(layer) -> float:
    return 1e-5 * layer.macs + 0.002 * layer.kernel + (0.01 if layer.se else 0.0) + 0.005


def test_predictor_evolution_and_dense_costs_share_one_layout(reordered):
    """With the columns reordered, every user still reads each gene where the one layout puts it."""
    space = reordered
    layout = GeneLayout.of(space)
    assert layout.resolution == layout.genes - 1 and layout.slices["kernels"].start == 0
    predictor = AccuracyPredictor(space, hidden=16, layers=1)
    macs, latency = macs_model(space), DenseCost.from_layer_cost(space, layer_ms, overhead=0.3)
    assert predictor.encoder.layout is layout and macs.layout is layout and latency.layout is layout

    archs = [sample_arch(space, i) for i in range(40)]
    rows = layout.encode_many(archs)
    assert macs.predict_batch(rows).tolist() == [space.macs(a) for a in archs]
    assert [space.layers(a) for a in predictor.encoder.decode(predictor.encoder.encode_rows(rows))] == [
        space.layers(a) for a in archs
    ]
    assert [space.layers(layout.decode(r)) for r in layout.canonical(rows)] == [space.layers(a) for a in archs]
    moved = layout.mutate(rows, np.random.default_rng(0), prob=0.0, resolution_prob=1.0)
    assert np.array_equal(np.delete(moved, layout.resolution, 1), np.delete(rows, layout.resolution, 1))

    cheapest = [layout.decode(r) for r in cheapest_rows(space, latency)]
    assert [a.resolution for a in cheapest] == list(space.resolutions)
    assert [latency.predict(a) for a in cheapest] == pytest.approx(
        [latency.predict(space.min_arch(r)) for r in space.resolutions]
    )
    sub = replace(space, resolutions=space.resolutions[1:])
    sub_archs = [a for a in archs if a.resolution in sub.resolutions]
    assert SubsetPredictor(predictor, space, sub).predict_batch(
        GeneLayout.of(sub).encode_many(sub_archs)
    ) == pytest.approx(predictor.predict_archs(sub_archs), abs=1e-5)

    budget = float(np.median(latency.predict_batch(rows)))
    cfg = SearchConfig([budget], seed=0, evolution=EvolutionConfig(population=20, generations=5))
    result = run_search(space, predictor, latency, cfg)
    arch = result.targets[0].arch
    assert arch.extra["latency_ms"] == pytest.approx(latency.predict(arch)) and latency.predict(arch) <= budget
    assert arch.extra["macs"] == space.macs(arch) and arch.extra["params"] == space.params(arch)
    assert arch.extra["predicted_top1"] == pytest.approx(predictor.predict(arch), abs=1e-4)


def test_mutation_and_crossover_draw_the_official_distributions(space):
    """One uniform per gene decides and picks a redraw: each gene is redrawn with its probability, to a
    uniform choice (so it changes with p * (1 - 1/choices)); crossover takes either parent's gene with 1/2."""
    layout = GeneLayout.of(space)
    rows = np.zeros((40_000, layout.genes), dtype=np.int64)
    mutants = layout.mutate(rows, np.random.default_rng(0), prob=0.3, resolution_prob=0.6)
    assert (mutants >= 0).all() and (mutants < layout.sizes).all()
    for col in range(layout.genes):
        p = 0.6 if col == layout.resolution else 0.3
        counts = np.bincount(mutants[:, col], minlength=layout.sizes[col]) / len(rows)
        redrawn = p / layout.sizes[col]
        assert counts[0] == pytest.approx(1 - p + redrawn, abs=0.01)
        assert counts[1:] == pytest.approx(np.full(layout.sizes[col] - 1, redrawn), abs=0.01)
    # rows of any leading shape (the search mutates broadcast views of its parents)
    parents = np.broadcast_to(layout.sample(5, np.random.default_rng(1)), (3, 5, layout.genes))
    assert layout.mutate(parents, np.random.default_rng(2), prob=0.0, resolution_prob=0.0).tolist() == parents.tolist()
    everything = layout.mutate(parents, np.random.default_rng(2), prob=1.0, resolution_prob=1.0)
    assert everything.shape == parents.shape and (everything < layout.sizes).all()
    a, b = np.zeros((40_000, layout.genes), np.int64), np.ones((40_000, layout.genes), np.int64)
    assert layout.crossover(a, b, np.random.default_rng(3)).mean(0) == pytest.approx(
        np.full(layout.genes, 0.5), abs=0.01
    )
