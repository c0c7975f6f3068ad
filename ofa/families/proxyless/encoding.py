"""The OFA-ProxylessNAS arch encoding: gene rows, their random operators, the predictor's features, cost terms.

Columns: the resolution, the depth of each stage but the last (which always runs one block), then the
kernel and the expand ratio of each block slot (official slot order). The search's sampling and
operators, canonical rows, the dense cost tables (`terms`) and the predictor's features
(`ArchEncoder`) all read this one layout.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ofa.families.genes import CostTerm, GeneLayoutBase, frozen_ints, gene_columns
from ofa.families.mbv3.encoding import SlotFeatures
from ofa.families.proxyless.arch import ProxylessArch
from ofa.families.proxyless.space import ProxylessSpace

GENE_ORDER = ("resolution", "depths", "kernels", "expands")  # gene groups, in column order


@dataclass(frozen=True, eq=False)
class GeneLayout(GeneLayoutBase):
    """Column layout of the gene rows of one space; get it with ``GeneLayout.of(space)`` (built once per space)."""

    space: ProxylessSpace
    depth_values: np.ndarray  # the depth choices
    slot_stage: np.ndarray  # stage of each block slot
    slot_index: np.ndarray  # position of each block slot within its stage

    @classmethod
    def of(cls, space: ProxylessSpace) -> GeneLayout:
        """The layout of ``space`` (cached: searches ask for it every generation)."""
        return _layout(space)

    @classmethod
    def build(cls, space: ProxylessSpace) -> GeneLayout:
        """Compute the layout of ``space`` in ``GENE_ORDER``; use ``of`` (cached) instead."""
        groups = {
            "resolution": [space.resolutions],
            "depths": [space.depths] * (space.num_stages - 1),
            "kernels": [space.kernels] * space.num_slots,
            "expands": [space.expands] * space.num_slots,
        }
        slots = [(s, j) for s in range(space.num_stages) for j in range(space.stage_slots(s))]
        return cls(
            space,
            *gene_columns(groups, GENE_ORDER),
            frozen_ints(space.depths),
            frozen_ints([s for s, _ in slots]),
            frozen_ints([j for _, j in slots]),
        )

    # ----------------------------------------------------------------- archs <-> rows
    def encode(self, arch: ProxylessArch, source: str = "arch") -> np.ndarray:
        """Arch -> row of choice indices; raises ``SpaceError`` naming ``source`` if a value is no choice."""
        self.space.check_choices(arch, source)
        values = (arch.resolution, *arch.depths[:-1], *arch.kernels, *arch.expands)
        return np.array([c.index(v) for c, v in zip(self.choices, values, strict=True)], dtype=np.int64)

    def decode(self, row: np.ndarray) -> ProxylessArch:
        vals = [self.choices[i][int(g)] for i, g in enumerate(np.asarray(row).ravel())]
        sl = self.slices
        return ProxylessArch(
            vals[self.resolution], (*vals[sl["depths"]], 1), tuple(vals[sl["kernels"]]), tuple(vals[sl["expands"]])
        )

    # ----------------------------------------------------------------- subnets behind rows
    def active_slots(self, rows: np.ndarray) -> np.ndarray:
        """(n, num_slots) mask of the block slots each row runs (slot index below its stage's depth)."""
        rows = self.as_rows(rows)
        depth = self.depth_values[rows[:, self.slices["depths"]]]
        depth = np.concatenate([depth, np.ones((len(rows), 1), dtype=np.int64)], axis=1)  # the last stage's 1
        return self.slot_index[None, :] < depth[:, self.slot_stage]

    def active(self, rows: np.ndarray) -> np.ndarray:
        """(n, genes) mask of the genes each row's subnet depends on: resolution and depths always,
        a slot's kernel and expand only when the slot runs."""
        slots = self.active_slots(rows)
        fixed = np.ones((len(slots), self.slices["depths"].stop), dtype=bool)
        return np.concatenate([fixed, slots, slots], axis=1)

    def every_arch(self, resolution: int) -> Iterator[ProxylessArch]:
        """Every distinct subnet at ``resolution`` once (unused slots take the first choice)."""
        space = self.space
        blocks = list(itertools.product(space.kernels, space.expands))
        for depths in itertools.product(space.depths, repeat=space.num_stages - 1):
            for stages in itertools.product(*(itertools.product(blocks, repeat=d) for d in (*depths, 1))):
                kernels, expands = [space.kernels[0]] * space.num_slots, [space.expands[0]] * space.num_slots
                for s, stage in enumerate(stages):
                    for j, (k, e) in enumerate(stage):
                        kernels[space.slot(s, j)], expands[space.slot(s, j)] = k, e
                yield ProxylessArch(resolution, (*depths, 1), tuple(kernels), tuple(expands))

    # ----------------------------------------------------------------- cost terms
    @property
    def terms(self) -> tuple[CostTerm, ...]:
        """The fixed layers (by resolution), then one term per block slot (resolution, kernel, expand)."""
        return _terms(self)

    def term_active(self, rows: np.ndarray) -> np.ndarray:
        """(n, 1 + num_slots): the fixed layers always run, a slot's block when within its stage's depth."""
        slots = self.active_slots(rows)
        return np.concatenate([np.ones((len(slots), 1), dtype=bool), slots], axis=1)

    def cheapest(self, fixed: np.ndarray, tables: Sequence[np.ndarray]) -> np.ndarray:
        """The cheapest row at each resolution of the cost ``fixed`` + Σ slot ``tables`` (exact).

        ``tables[i]``: slot i's cost, (resolutions, kernels, expands). The cost is additive, so each slot
        takes its cheapest kernel/expand and each elastic stage the depth of smallest prefix sum.
        """
        space = self.space
        block = np.stack(tables, axis=1)  # (resolutions, slots, kernels, expands)
        n_res, n_slots, _, n_exp = block.shape
        flat = block.reshape(n_res, n_slots, -1)
        choice, value = flat.argmin(-1), flat.min(-1)
        elastic = value[:, :-1].reshape(n_res, space.num_stages - 1, space.max_depth)
        prefix = np.cumsum(elastic, axis=-1)  # [..., j]: cost of depth j + 1
        rows = np.zeros((n_res, self.genes), dtype=np.int64)
        rows[:, self.resolution] = np.arange(n_res)
        rows[:, self.slices["depths"]] = np.argmin(prefix[:, :, np.asarray(space.depths) - 1], axis=-1)
        rows[:, self.slices["kernels"]] = choice // n_exp
        rows[:, self.slices["expands"]] = choice % n_exp
        return rows


@lru_cache(maxsize=16)
def _layout(space: ProxylessSpace) -> GeneLayout:
    return GeneLayout.build(space)


def _terms(layout: GeneLayout) -> tuple[CostTerm, ...]:
    space, sl, r = layout.space, layout.slices, layout.resolution

    def block(slot: int) -> CostTerm:
        s, j = int(layout.slot_stage[slot]), int(layout.slot_index[slot])
        return CostTerm(
            (r, sl["kernels"].start + slot, sl["expands"].start + slot),
            lambda res, k, e: [space.block_spec(res, s, j, k, e)],
        )

    return (CostTerm((r,), space.fixed_layers), *(block(i) for i in range(space.num_slots)))


def sample_arch(
    space: ProxylessSpace,
    rng: np.random.Generator | int | None = None,
    *,
    kernels: Sequence[int] | None = None,
    expands: Sequence[int] | None = None,
    depths: Sequence[int] | None = None,
    resolutions: Sequence[int] | None = None,
) -> ProxylessArch:
    """Uniform random arch, optionally restricted to subsets of the choices (a training phase).

    ``rng`` is a generator or a seed: the same seed gives the same arch. The last stage's depth is 1.
    """
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    n = space.num_slots
    return ProxylessArch(
        int(rng.choice(list(resolutions or space.resolutions))),
        (*(int(d) for d in rng.choice(list(depths or space.depths), size=space.num_stages - 1)), 1),
        tuple(int(k) for k in rng.choice(list(kernels or space.kernels), size=n)),
        tuple(int(e) for e in rng.choice(list(expands or space.expands), size=n)),
    )


class ArchEncoder(SlotFeatures):
    """Gene rows -> the predictor's features (`SlotFeatures`: mbv3's, over this family's block slots)."""

    def __init__(self, space: ProxylessSpace) -> None:
        super().__init__(space, GeneLayout.of(space))
