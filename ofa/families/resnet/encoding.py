"""The OFA-ResNet arch encoding: gene rows, the random operators on them, the predictor's features, cost terms.

Columns, in ``GENE_ORDER``: the resolution; the depth genes (the stem's, choices smallest/largest depth,
then each stage's extra depth); one expand ratio per block slot; the width genes (indices into the
space's multipliers: stem middle, stem output, then each stage). A block's cost depends on its input
width, the previous stage's width gene, so its cost term spans several width columns.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ofa.families.genes import CostTerm, GeneLayoutBase, frozen_ints, gene_columns
from ofa.families.resnet.arch import ResNetArch
from ofa.families.resnet.layers import LayerSpec
from ofa.families.resnet.space import ResNetSpace

GENE_ORDER = ("resolution", "depths", "expands", "widths")


@dataclass(frozen=True, eq=False)
class GeneLayout(GeneLayoutBase):
    """Column layout of the gene rows of one space; get it with ``GeneLayout.of(space)`` (built once per space)."""

    slot_stage: np.ndarray  # stage of each block slot
    slot_index: np.ndarray  # position of each block slot within its stage

    @classmethod
    def of(cls, space: ResNetSpace) -> GeneLayout:
        """The layout of ``space`` (cached: searches ask for it every generation)."""
        return _layout(space)

    @classmethod
    def build(cls, space: ResNetSpace) -> GeneLayout:
        """Compute the layout of ``space`` in ``GENE_ORDER``; use ``of`` (cached) instead."""
        stem = tuple(sorted({min(space.depths), space.max_depth}))
        groups = {
            "resolution": [space.resolutions],
            "depths": [stem] + [space.depths] * space.num_stages,
            "expands": [space.expands] * space.num_slots,
            "widths": [tuple(range(len(space.widths)))] * space.num_widths,
        }
        stages = range(space.num_stages)
        return cls(
            space,
            *gene_columns(groups, GENE_ORDER),
            frozen_ints([s for s in stages for _ in range(space.stage_slots(s))]),
            frozen_ints([j for s in stages for j in range(space.stage_slots(s))]),
        )

    # ----------------------------------------------------------------- archs <-> rows
    def encode(self, arch: ResNetArch, source: str = "arch") -> np.ndarray:
        """Arch -> row of choice indices; raises ``SpaceError`` naming ``source`` if a value is no choice."""
        self.space.check_choices(arch, source)
        values = [arch.resolution, *arch.depths, *arch.expands, *arch.widths]
        return np.array([c.index(v) for c, v in zip(self.choices, values, strict=True)], dtype=np.int64)

    def uniform(self, resolution: int, values: Mapping[str, Any]) -> ResNetArch:
        """The arch taking ``values[group]`` in every gene of each named group (named as ``elastic_dims()``)
        at ``resolution``, the other genes their first choice; the stem's depth gene runs its block only at
        the largest depth, as in `sample_arch`."""
        row = np.zeros(self.genes, dtype=np.int64)
        row[self.resolution] = self.choices[self.resolution].index(resolution)
        stem = self.slices["depths"].start
        for group, value in values.items():
            for col in range(*self.slices[group].indices(self.genes)):
                skip = col == stem and value != self.space.max_depth
                row[col] = self.choices[col].index(min(self.space.depths) if skip else value)
        return self.decode(row)

    def decode(self, row: np.ndarray) -> ResNetArch:
        vals = [self.choices[i][int(g)] for i, g in enumerate(np.asarray(row).ravel())]
        sl = self.slices
        return ResNetArch(
            int(vals[self.resolution]),
            tuple(int(v) for v in vals[sl["depths"]]),
            tuple(float(v) for v in vals[sl["expands"]]),
            tuple(int(v) for v in vals[sl["widths"]]),
        )

    # ----------------------------------------------------------------- subnets behind rows
    def active_slots(self, rows: np.ndarray) -> np.ndarray:
        """(n, num_slots) mask of the block slots each row runs (slot index below base + extra depth)."""
        rows = self.as_rows(rows)
        space, sl = self.space, self.slices
        extra = np.asarray(space.depths)[rows[:, sl["depths"].start + 1 : sl["depths"].stop]]
        depth = extra + np.asarray(space.base_depths)[None, :]
        return self.slot_index[None, :] < depth[:, self.slot_stage]

    def active(self, rows: np.ndarray) -> np.ndarray:
        """(n, genes): resolution, depths and widths always matter; a slot's expand only when the slot runs."""
        slots = self.active_slots(rows)
        n = len(slots)
        fixed = np.ones((n, self.slices["expands"].start), dtype=bool)
        return np.concatenate([fixed, slots, np.ones((n, self.space.num_widths), dtype=bool)], axis=1)

    def every_arch(self, resolution: int) -> Iterator[ResNetArch]:
        """Every distinct subnet at ``resolution`` once (unused slots take the first expand)."""
        space, widths = self.space, range(len(self.space.widths))
        stem = sorted({min(space.depths), space.max_depth})
        stages = [list(_stage_settings(space, s)) for s in range(space.num_stages)]
        for d0, w0, w1, *chosen in itertools.product(stem, widths, widths, *stages):
            depths = (d0, *(d for _, d, _ in chosen))
            expands = tuple(e for *_, es in chosen for e in es)
            yield ResNetArch(resolution, depths, expands, (w0, w1, *(w for w, _, _ in chosen)))

    # ----------------------------------------------------------------- cost terms
    @property
    def terms(self) -> tuple[CostTerm, ...]:
        """The stem (resolution, stem depth, stem widths), one term per block slot, then the head."""
        return _terms(self)

    def term_active(self, rows: np.ndarray) -> np.ndarray:
        """(n, num_slots + 2): the stem and head always run, a slot's block when within its stage's depth."""
        slots = self.active_slots(rows)
        ones = np.ones((len(slots), 1), dtype=bool)
        return np.concatenate([ones, slots, ones], axis=1)

    def cheapest(self, fixed: np.ndarray, tables: Sequence[np.ndarray]) -> np.ndarray:
        """The cheapest row at each resolution of the cost ``fixed`` + Σ active term ``tables`` (exact).

        ``tables`` follow ``terms``, each indexed by its columns' choices (resolution first). The width
        genes chain the terms (stem -> stage 0 -> ... -> head): a dynamic program over each stage's output
        width finds the minimum, where each slot takes its cheapest expand and each stage the extra depth
        whose blocks cost least for that width.
        """
        space, sl = self.space, self.slices
        n_res, at = len(space.resolutions), np.arange(len(space.resolutions))
        stem = np.asarray(tables[0])  # (res, stem depth, w0, w1)
        stem_flat = stem.reshape(n_res, -1, stem.shape[-1])
        best, stem_arg = stem_flat.min(1), stem_flat.argmin(1)  # by the stem's output width
        stages, back = [], []
        for s in range(space.num_stages):
            stage = _cheapest_stage(space, s, tables[1 + space.slot_offset(s) : 1 + space.slot_offset(s + 1)])
            total = best[:, :, None] + stage[0]  # (res, input width, output width)
            back.append(total.argmin(1))
            best = total.min(1)
            stages.append(stage)
        out = (best + np.asarray(tables[-1])).argmin(1)
        rows = np.zeros((n_res, self.genes), dtype=np.int64)
        rows[:, self.resolution] = at
        w0 = sl["widths"].start
        for s in reversed(range(space.num_stages)):
            _, expands, depth = stages[s]
            w_in = back[s][at, out]
            rows[:, w0 + 2 + s] = out
            rows[:, sl["depths"].start + 1 + s] = depth[at, out]
            first = sl["expands"].start + space.slot_offset(s)
            rows[:, first] = expands[0][at, w_in, out]
            for j, arg in enumerate(expands[1:], start=1):
                rows[:, first + j] = arg[at, out]
            out = w_in
        rows[:, w0 + 1] = out
        rows[:, sl["depths"].start], rows[:, w0] = np.divmod(stem_arg[at, out], stem.shape[2])
        return self.canonical(rows)


def _terms(layout: GeneLayout) -> tuple[CostTerm, ...]:
    space, sl, r = layout.space, layout.slices, layout.resolution
    stem_depth, w0 = sl["depths"].start, sl["widths"].start

    def stem(res: int, depth: int, mid: int, out: int) -> list[LayerSpec]:
        widths = space.stem_mid_choices()[mid], space.stem_out_choices()[out]
        return space.stem_layers(res, *widths, depth == space.max_depth)

    def block(slot: int) -> CostTerm:
        s, j = int(layout.slot_stage[slot]), int(layout.slot_index[slot])
        outs = space.stage_choices(s)
        if j > 0:
            return CostTerm(
                (r, sl["expands"].start + slot, w0 + 2 + s),
                lambda res, e, w: [space.block_spec(res, s, j, outs[w], outs[w], e)],
            )
        ins = space.block_in_choices(s)
        return CostTerm(
            (r, sl["expands"].start + slot, w0 + 1 + s, w0 + 2 + s),
            lambda res, e, wi, w: [space.block_spec(res, s, 0, ins[wi], outs[w], e)],
        )

    last = space.stage_choices(space.num_stages - 1)
    head = CostTerm((r, w0 + 1 + space.num_stages), lambda res, w: [space.head_layer(res, last[w])])
    return (CostTerm((r, stem_depth, w0, w0 + 1), stem), *(block(i) for i in range(space.num_slots)), head)


def _stage_settings(space: ResNetSpace, stage: int) -> Iterator[tuple[int, int, tuple[float, ...]]]:
    """(width index, extra depth, expand of every slot) of each distinct setting of one stage."""
    for width, depth in itertools.product(range(len(space.widths)), space.depths):
        runs = space.base_depths[stage] + depth
        for expands in itertools.product(space.expands, repeat=runs):
            yield width, depth, expands + (space.expands[0],) * (space.stage_slots(stage) - runs)


def _cheapest_stage(
    space: ResNetSpace, stage: int, tables: Sequence[np.ndarray]
) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """A stage's least cost by (res, input width, output width), each slot's cheapest expand (first slot by
    (res, input, output), the others by (res, output)), and the cheapest extra-depth index by (res, output)."""
    first = np.asarray(tables[0])  # (res, expand, input width, output width)
    rest = [np.asarray(t) for t in tables[1:]]  # (res, expand, output width)
    per_slot = [np.zeros((first.shape[0], first.shape[-1])), *(t.min(1) for t in rest)]
    blocks = np.cumsum(np.stack(per_slot, axis=1), axis=1)  # (res, k, output): slots 1..k
    by_depth = blocks[:, [space.base_depths[stage] + d - 1 for d in space.depths]]  # (res, depth, output)
    cost = first.min(1) + by_depth.min(1)[:, None, :]
    return cost, [first.argmin(1), *(t.argmin(1) for t in rest)], by_depth.argmin(1)


@lru_cache(maxsize=16)
def _layout(space: ResNetSpace) -> GeneLayout:
    return GeneLayout.build(space)


def sample_arch(
    space: ResNetSpace,
    rng: np.random.Generator | int | None = None,
    *,
    depths: Sequence[int] | None = None,
    expands: Sequence[float] | None = None,
    widths: Sequence[int] | None = None,
    resolutions: Sequence[int] | None = None,
) -> ResNetArch:
    """Uniform random arch, optionally restricted to subsets of the choices (a training phase; ``widths`` by
    index). The stem's depth gene is drawn from the smallest and largest allowed depth, as OFA does."""
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    ds = list(depths or space.depths)
    ws = list(widths or range(len(space.widths)))
    stem = int(rng.choice([min(ds), max(ds)]))
    stem = stem if stem == space.max_depth else min(space.depths)
    return ResNetArch(
        int(rng.choice(list(resolutions or space.resolutions))),
        (stem, *(int(d) for d in rng.choice(ds, size=space.num_stages))),
        tuple(float(e) for e in rng.choice(list(expands or space.expands), size=space.num_slots)),
        tuple(int(w) for w in rng.choice(ws, size=space.num_widths)),
    )


class ArchEncoder:
    """Gene rows -> the predictor's features (OFA's ResNetArchEncoder): one-hot resolution, stem block
    on/off, one-hot width per width gene, one-hot expand per block slot (zeros past the stage's depth)."""

    def __init__(self, space: ResNetSpace) -> None:
        self.space, self.layout = space, GeneLayout.of(space)
        depths = self.layout.slices["depths"]
        self._stage_genes = np.arange(depths.start + 1, depths.stop)  # no features of their own
        sizes = self.layout.sizes.copy()
        sizes[self._stage_genes] = 0
        self._offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        self.dim = int(sizes.sum())

    def encode_rows(self, rows: np.ndarray) -> np.ndarray:
        """(n, dim) float32 features of integer gene rows (the stages' depths are implicit in the expands)."""
        lay = self.layout
        rows = lay.as_rows(rows)
        mask = lay.active(rows)
        mask[:, self._stage_genes] = False
        out = np.zeros((rows.shape[0], self.dim), dtype=np.float32)
        n, g = np.nonzero(mask)
        out[n, self._offsets[g] + rows[n, g]] = 1.0
        return out

    def encode(self, archs: ResNetArch | Sequence[ResNetArch]) -> np.ndarray:
        archs = [archs] if isinstance(archs, ResNetArch) else list(archs)
        return self.encode_rows(self.layout.encode_many(archs))
