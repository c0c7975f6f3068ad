"""Additive per-layer costs (latency, MACs, params) as dense arrays, evaluated for whole populations.

Every cost the search constrains is a sum over the layers a subnet runs. A family describes those
layers as cost terms (``ofa.families.genes.CostTerm``): each depends on a few gene columns, so its
cost is a table over the product of their choices. Terms over the resolution alone run in every
subnet and fold into one per-resolution ``fixed`` cost; the others are evaluated for a population
with one gather per group of terms with as many columns, then a masked sum (``layout.term_active``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ofa.families.registry import family_of


def _columns(cols: np.ndarray) -> slice | np.ndarray:
    """Gene columns as a slice where they allow it (a view of the rows instead of a copy)."""
    if (cols == cols[0]).all():
        return slice(int(cols[0]), int(cols[0]) + 1)
    if (np.diff(cols) == 1).all():
        return slice(int(cols[0]), int(cols[-1]) + 1)
    return cols


class _Group:
    """Terms with the same number of columns: their tables flattened into one array, gathered at once."""

    def __init__(self, ids: Sequence[int], columns: Sequence[tuple[int, ...]], tables: Sequence[np.ndarray]) -> None:
        self.ids = _columns(np.asarray(ids))
        cols = np.asarray(columns, dtype=np.int64)  # (terms, k)
        strides = np.array([[s // t.itemsize for s in t.strides] for t in map(np.ascontiguousarray, tables)])
        self.flat = np.concatenate([np.ascontiguousarray(t).ravel() for t in tables])
        self.offsets = np.cumsum([0] + [t.size for t in tables[:-1]])
        self.parts = [
            (_columns(cols[:, j]), int(strides[0, j]) if (strides[:, j] == strides[0, j]).all() else strides[:, j])
            for j in range(cols.shape[1])
        ]

    def __call__(self, rows: np.ndarray, active: np.ndarray) -> np.ndarray:
        (cols, stride), *rest = self.parts
        index = rows[:, cols] * stride + self.offsets
        for cols, stride in rest:
            index += rows[:, cols] * stride
        return np.where(active[:, self.ids], self.flat[index], 0.0).sum(axis=1)


class DenseCost:
    """cost(row) = fixed[resolution] + Σ over the active non-fixed terms of tables[term][their choices]."""

    def __init__(self, space: Any, fixed: np.ndarray, tables: Sequence[np.ndarray]) -> None:
        self.space, self.layout = space, family_of(space).layout(space)
        terms = self.layout.terms
        self.ids = [i for i, t in enumerate(terms) if t.columns != (self.layout.resolution,)]
        shapes = [tuple(int(self.layout.sizes[c]) for c in terms[i].columns) for i in self.ids]
        self.fixed, self.tables = np.asarray(fixed), [np.asarray(t) for t in tables]
        if self.fixed.shape != (len(space.resolutions),) or [t.shape for t in self.tables] != shapes:
            raise ValueError(
                f"dense cost arrays of shape {self.fixed.shape}, {[t.shape for t in self.tables]} do not fit the "
                f"space ({len(space.resolutions)},), {shapes}"
            )
        by_width: dict[int, list[int]] = {}
        for n, i in enumerate(self.ids):
            by_width.setdefault(len(terms[i].columns), []).append(n)
        self._groups = [
            _Group([self.ids[n] for n in ns], [terms[self.ids[n]].columns for n in ns], [self.tables[n] for n in ns])
            for _, ns in sorted(by_width.items())
        ]

    @classmethod
    def from_layer_cost(cls, space: Any, cost: Callable[[Any], float], overhead: float = 0.0) -> DenseCost:
        """Tabulate ``cost(layer)`` for every term of the space at every choice of its columns (plus a
        per-network ``overhead``)."""
        layout = family_of(space).layout(space)
        fixed_terms = [t for t in layout.terms if t.columns == (layout.resolution,)]
        fixed = np.array(
            [overhead + sum(cost(layer) for t in fixed_terms for layer in t.layers(r)) for r in space.resolutions],
            dtype=np.float64,
        )
        tables = [_tabulate(layout, t, cost) for t in layout.terms if t.columns != (layout.resolution,)]
        return cls(space, fixed, tables)

    def affine(self, scale: np.ndarray, offset: np.ndarray) -> DenseCost:
        """``scale[r] * cost + offset[r]`` per resolution (each non-fixed term needs the resolution column)."""
        res, terms = self.layout.resolution, self.layout.terms
        tables = []
        for i, table in zip(self.ids, self.tables):
            axis = terms[i].columns.index(res)
            tables.append(table * np.asarray(scale).reshape([-1 if a == axis else 1 for a in range(table.ndim)]))
        return DenseCost(self.space, np.asarray(scale) * self.fixed + np.asarray(offset), tables)

    def predict_batch(self, rows: np.ndarray) -> np.ndarray:
        """Costs of a population given as gene rows (the family's gene layout)."""
        lay = self.layout
        rows = lay.as_rows(rows)
        total = self.fixed[rows[:, lay.resolution]]
        if self._groups:
            active = lay.term_active(rows)
            for group in self._groups:
                total = total + group(rows, active)
        return total

    def predict(self, arch: Any) -> float:
        return float(self.predict_batch(self.layout.encode(arch))[0])

    def cheapest_rows(self) -> np.ndarray:
        """The cheapest subnet at each resolution (the family's layout knows how its terms combine)."""
        return self.layout.cheapest(self.fixed, self.tables)


def _tabulate(layout: Any, term: Any, cost: Callable[[Any], float]) -> np.ndarray:
    choices = [layout.choices[c] for c in term.columns]
    values = [sum(cost(layer) for layer in term.layers(*combo)) for combo in itertools.product(*choices)]
    return np.array(values, dtype=np.float64).reshape([len(c) for c in choices])


def macs_model(space: Any) -> DenseCost:
    return DenseCost.from_layer_cost(space, lambda layer: layer.macs)


def params_model(space: Any) -> DenseCost:
    return DenseCost.from_layer_cost(space, lambda layer: layer.params)
