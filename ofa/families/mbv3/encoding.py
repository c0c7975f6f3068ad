"""The arch encoding: the ONE definition of how a subnet becomes numbers, and the random operators on it.

A population is an integer array of gene rows (one choice index per gene). ``GeneLayout`` says
which columns hold the resolution, the depth of each stage and the kernel and expand ratio of
each block slot; the search's sampling, mutation and crossover, its canonical rows, the dense
cost tables and the accuracy predictor's one-hot features (``ArchEncoder``) all read that one
layout, so they cannot disagree about what a column means.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ofa.families.genes import CostTerm, GeneLayoutBase, frozen_ints, gene_columns
from ofa.families.mbv3.arch import Arch
from ofa.families.mbv3.space import SearchSpace
from ofa.utils.errors import OFAError

GENE_ORDER = ("resolution", "depths", "kernels", "expands")  # gene groups, in column order


@dataclass(frozen=True, eq=False)
class GeneLayout(GeneLayoutBase):
    """Column layout of the gene rows of one space; get it with ``GeneLayout.of(space)`` (built once per space)."""

    depth_values: np.ndarray  # the depth choices
    slot_stage: np.ndarray  # stage of each block slot
    slot_index: np.ndarray  # position of each block slot within its stage

    @classmethod
    def of(cls, space: SearchSpace) -> GeneLayout:
        """The layout of ``space`` (cached: searches ask for it every generation)."""
        return _layout(space)

    @classmethod
    def build(cls, space: SearchSpace) -> GeneLayout:
        """Compute the layout of ``space`` in ``GENE_ORDER``; use ``of`` (cached) instead."""
        groups = {
            "resolution": [space.resolutions],
            "depths": [space.depths] * space.num_stages,
            "kernels": [space.kernels] * space.num_slots,
            "expands": [space.expands] * space.num_slots,
        }
        return cls(
            space,
            *gene_columns(groups, GENE_ORDER),
            frozen_ints(space.depths),
            frozen_ints(np.repeat(np.arange(space.num_stages), space.max_depth)),
            frozen_ints(np.tile(np.arange(space.max_depth), space.num_stages)),
        )

    # ----------------------------------------------------------------- archs <-> rows
    def encode(self, arch: Arch, source: str = "arch") -> np.ndarray:
        """Arch -> row of choice indices; raises ``SpaceError`` naming ``source`` if a value is no choice."""
        self.space.check_choices(arch, source)
        groups = {
            "resolution": (arch.resolution,),
            "depths": arch.depths,
            "kernels": arch.kernels,
            "expands": arch.expands,
        }
        values = [v for name in self.slices for v in groups[name]]
        return np.array([c.index(v) for c, v in zip(self.choices, values)], dtype=np.int64)

    def decode(self, row: np.ndarray) -> Arch:
        vals = [self.choices[i][int(g)] for i, g in enumerate(np.asarray(row).ravel())]
        sl = self.slices
        return Arch(
            vals[self.resolution], tuple(vals[sl["depths"]]), tuple(vals[sl["kernels"]]), tuple(vals[sl["expands"]])
        )

    # ----------------------------------------------------------------- subnets behind rows
    def active_slots(self, rows: np.ndarray) -> np.ndarray:
        """(n, num_slots) mask of the block slots each row runs (slot index below its stage's depth)."""
        rows = self.as_rows(rows)
        depth = self.depth_values[rows[:, self.slices["depths"]]]
        return self.slot_index[None, :] < depth[:, self.slot_stage]

    def active(self, rows: np.ndarray) -> np.ndarray:
        """Resolution and depths always matter; a slot's kernel and expand only when the slot runs."""
        slots = self.active_slots(rows)
        out = np.ones((len(slots), self.genes), dtype=bool)
        out[:, self.slices["kernels"]] = out[:, self.slices["expands"]] = slots
        return out

    def every_arch(self, resolution: int) -> Iterator[Arch]:
        """Every distinct subnet at ``resolution`` once (unused slots take the first choice)."""
        space = self.space
        d = space.max_depth
        block_choices = list(itertools.product(space.kernels, space.expands))
        for depths in itertools.product(space.depths, repeat=space.num_stages):
            per_stage = [itertools.product(block_choices, repeat=depth) for depth in depths]
            for blocks in itertools.product(*per_stage):
                kernels, expands = [space.kernels[0]] * space.num_slots, [space.expands[0]] * space.num_slots
                for s, stage in enumerate(blocks):
                    for j, (k, e) in enumerate(stage):
                        kernels[s * d + j], expands[s * d + j] = k, e
                yield Arch(resolution, depths, tuple(kernels), tuple(expands))

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

        Per resolution each slot takes its cheapest kernel/expand and each stage the depth whose
        prefix sum is smallest: the cost is additive, so this is the exact minimum.
        """
        space = self.space
        block = np.stack(tables, axis=1)  # (resolutions, slots, kernels, expands)
        n_res, n_slots, _, n_exp = block.shape
        flat = block.reshape(n_res, n_slots, -1)
        choice, value = flat.argmin(-1), flat.min(-1)
        prefix = np.cumsum(value.reshape(n_res, space.num_stages, space.max_depth), axis=-1)  # cost of depth j+1
        rows = np.zeros((n_res, self.genes), dtype=np.int64)
        rows[:, self.resolution] = np.arange(n_res)
        rows[:, self.slices["depths"]] = np.argmin(prefix[:, :, np.asarray(space.depths) - 1], axis=-1)
        rows[:, self.slices["kernels"]] = choice // n_exp
        rows[:, self.slices["expands"]] = choice % n_exp
        return rows


def _terms(layout: GeneLayout) -> tuple[CostTerm, ...]:
    space, sl = layout.space, layout.slices
    r = layout.resolution

    def block(slot: int) -> CostTerm:
        s, j = divmod(slot, space.max_depth)
        return CostTerm(
            (r, sl["kernels"].start + slot, sl["expands"].start + slot),
            lambda res, k, e: [space.block_spec(res, s, j, k, e)],
        )

    return (CostTerm((r,), space.fixed_layers), *(block(i) for i in range(space.num_slots)))


@lru_cache(maxsize=16)
def _layout(space: SearchSpace) -> GeneLayout:
    return GeneLayout.build(space)


def sample_arch(
    space: SearchSpace,
    rng: np.random.Generator | int | None = None,
    *,
    kernels: Sequence[int] | None = None,
    expands: Sequence[int] | None = None,
    depths: Sequence[int] | None = None,
    resolutions: Sequence[int] | None = None,
) -> Arch:
    """Uniform random arch, optionally restricted to subsets of the choices (a training phase).

    ``rng`` is a generator or a seed: the same seed gives the same arch.
    """
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    ks = list(kernels or space.kernels)
    es = list(expands or space.expands)
    ds = list(depths or space.depths)
    rs = list(resolutions or space.resolutions)
    n = space.num_slots
    return Arch(
        int(rng.choice(rs)),
        tuple(int(d) for d in rng.choice(ds, size=space.num_stages)),
        tuple(int(k) for k in rng.choice(ks, size=n)),
        tuple(int(e) for e in rng.choice(es, size=n)),
    )


class SlotFeatures:
    """Gene rows -> the predictor's features (OFA's MobileNetArchEncoder), for any layout of block slots.

    Per block slot a one-hot kernel and a one-hot expand ratio, all zeros for slots past the
    stage's depth (the depth is implicit), then a one-hot resolution. A whole population is
    encoded with one scatter. ``layout`` has ``kernels``/``expands`` slot columns and ``active_slots``
    (mbv3's and OFA-ProxylessNAS's layouts).
    """

    def __init__(self, space: Any, layout: Any) -> None:
        self.space, self.layout = space, layout
        self.n_kernels, self.n_expands = len(space.kernels), len(space.expands)
        self.per_slot = self.n_kernels + self.n_expands
        self.res_offset = space.num_slots * self.per_slot
        self.dim = self.res_offset + len(space.resolutions)
        self._slot_offset = np.arange(space.num_slots) * self.per_slot

    def encode_rows(self, rows: np.ndarray) -> np.ndarray:
        """(n, dim) float32 features of integer gene rows."""
        lay = self.layout
        rows = lay.as_rows(rows)
        n = rows.shape[0]
        active = lay.active_slots(rows).astype(np.float32)
        out = np.zeros((n, self.dim), dtype=np.float32)
        at = np.arange(n)[:, None]
        out[at, self._slot_offset + rows[:, lay.slices["kernels"]]] = active
        out[at, self._slot_offset + self.n_kernels + rows[:, lay.slices["expands"]]] = active
        out[np.arange(n), self.res_offset + rows[:, lay.resolution]] = 1.0
        return out

    def encode(self, archs: Arch | Sequence[Arch]) -> np.ndarray:
        archs = [archs] if isinstance(archs, Arch) else list(archs)
        return self.encode_rows(self.layout.encode_many(archs))


class ArchEncoder(SlotFeatures):
    """Gene rows <-> the predictor's features of an mbv3 space (`SlotFeatures`, and back)."""

    def __init__(self, space: SearchSpace) -> None:
        super().__init__(space, GeneLayout.of(space))

    def decode(self, features: np.ndarray) -> list[Arch]:
        """Features -> archs (unused slots take the smallest choice); raises ``OFAError`` on a malformed row."""
        features = np.asarray(features).reshape(-1, self.dim)
        space, d = self.space, self.space.max_depth
        archs = []
        for f in features:
            slots = f[: self.res_offset].reshape(space.num_slots, self.per_slot)
            active = slots[:, : self.n_kernels].sum(1) > 0
            depths = []
            for s in range(space.num_stages):
                used = active[s * d : (s + 1) * d]
                depth = int(used.sum())
                if not used[:depth].all() or depth not in space.depths:
                    raise OFAError(f"features of stage {s} do not describe a depth of this space")
                depths.append(depth)
            kernels = [
                space.kernels[int(k)] if a else space.kernels[0]
                for k, a in zip(slots[:, : self.n_kernels].argmax(1), active)
            ]
            expands = [
                space.expands[int(e)] if a else space.expands[0]
                for e, a in zip(slots[:, self.n_kernels :].argmax(1), active)
            ]
            res = space.resolutions[int(f[self.res_offset :].argmax())]
            archs.append(Arch(res, tuple(depths), tuple(kernels), tuple(expands)))
        return archs
