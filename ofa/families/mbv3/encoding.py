"""The arch encoding: the ONE definition of how a subnet becomes numbers, and the random operators on it.

A population is an integer array of gene rows (one choice index per gene). ``GeneLayout`` says
which columns hold the resolution, the depth of each stage and the kernel and expand ratio of
each block slot; the search's sampling, mutation and crossover, its canonical rows, the dense
cost tables and the accuracy predictor's one-hot features (``ArchEncoder``) all read that one
layout, so they cannot disagree about what a column means.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ofa.families.mbv3.arch import Arch
from ofa.families.mbv3.space import SearchSpace
from ofa.utils.errors import OFAError

GENE_ORDER = ("resolution", "depths", "kernels", "expands")  # gene groups, in column order


def _frozen(values: Sequence[int]) -> np.ndarray:
    out = np.asarray(values, dtype=np.int64)
    out.flags.writeable = False
    return out


@dataclass(frozen=True, eq=False)
class GeneLayout:
    """Column layout of the gene rows of one space; get it with ``GeneLayout.of(space)`` (built once per space)."""

    space: SearchSpace
    slices: Mapping[str, slice]  # columns of each gene group (GENE_ORDER)
    choices: tuple[tuple[int, ...], ...]  # choice values of each gene
    sizes: np.ndarray  # number of choices of each gene
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
        slices, choices = {}, []
        for name in GENE_ORDER:
            slices[name] = slice(len(choices), len(choices) + len(groups[name]))
            choices += groups[name]
        return cls(
            space,
            slices,
            tuple(choices),
            _frozen([len(c) for c in choices]),
            _frozen(space.depths),
            _frozen(np.repeat(np.arange(space.num_stages), space.max_depth)),
            _frozen(np.tile(np.arange(space.max_depth), space.num_stages)),
        )

    @property
    def genes(self) -> int:
        return len(self.choices)

    @property
    def resolution(self) -> int:
        """Column of the resolution gene."""
        return self.slices["resolution"].start

    def as_rows(self, rows: np.ndarray) -> np.ndarray:
        """``rows`` as an (n, genes) int64 array (a single row becomes one row)."""
        return np.asarray(rows, dtype=np.int64).reshape(-1, self.genes)

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

    def encode_many(self, archs: Sequence[Arch]) -> np.ndarray:
        return np.stack([self.encode(a) for a in archs]) if len(archs) else np.zeros((0, self.genes), np.int64)

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

    def canonical(self, rows: np.ndarray) -> np.ndarray:
        """Rows with unused slots set to choice 0: one row per distinct subnet."""
        rows = np.array(rows, dtype=np.int64).reshape(-1, self.genes)
        inactive = ~self.active_slots(rows)
        for name in ("kernels", "expands"):
            genes = rows[:, self.slices[name]]  # a view: writes land in rows
            genes[inactive] = 0
        return rows

    # ----------------------------------------------------------------- random operators (OFA's)
    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` uniform random archs as gene rows."""
        return (rng.random((n, self.genes)) * self.sizes).astype(np.int64)

    def mutate(
        self, rows: np.ndarray, rng: np.random.Generator, prob: float = 0.1, resolution_prob: float = 0.5
    ) -> np.ndarray:
        """Redraw each gene with probability ``prob`` (the resolution with ``resolution_prob``), as OFA."""
        p = np.full(rows.shape[1], prob)
        p[self.resolution] = resolution_prob
        redraw = rng.random(rows.shape) < p
        fresh = self.sample(rows.shape[0], rng)
        return np.where(redraw, fresh, rows)

    def crossover(self, a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Uniform crossover: each gene from either parent with probability 1/2."""
        return np.where(rng.random(a.shape) < 0.5, a, b)


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


class ArchEncoder:
    """Gene rows <-> the predictor's features (OFA's MobileNetArchEncoder).

    Per block slot a one-hot kernel and a one-hot expand ratio, all zeros for slots past the
    stage's depth (the depth is implicit), then a one-hot resolution. A whole population is
    encoded with one scatter.
    """

    def __init__(self, space: SearchSpace) -> None:
        self.space, self.layout = space, GeneLayout.of(space)
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
