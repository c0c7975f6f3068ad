"""The family-neutral half of a gene layout, and the cost terms a family describes its layers by.

A population is an integer array of gene rows, one choice index per gene. What a column means is
the family's (its ``GeneLayout`` subclass encodes and decodes archs and says which genes and which
cost terms a row runs); sampling, mutation, crossover and canonical rows only need the per-gene
choice counts and the ``active`` mask, so they live here once for every family.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class CostTerm:
    """Layers whose cost depends on a few gene columns; a subnet's cost is the sum of its active terms.

    ``layers(*values)`` takes the choice VALUES of ``columns`` in order and returns the layers the term
    runs for them. A term over the resolution column alone runs in every subnet.
    """

    columns: tuple[int, ...]
    layers: Callable[..., Sequence[Any]]


def frozen_ints(values: Sequence[int]) -> np.ndarray:
    """A read-only int64 array (layouts are cached and shared)."""
    out = np.asarray(values, dtype=np.int64)
    out.flags.writeable = False
    return out


def gene_columns(
    groups: Mapping[str, Sequence[tuple[int, ...]]], order: Sequence[str]
) -> tuple[dict[str, slice], tuple[tuple[int, ...], ...], np.ndarray]:
    """The genes of ``groups`` (group -> each gene's choices) laid out group after group in ``order``: each
    group's columns, every gene's choices and their counts, the first fields of a layout after its space."""
    slices: dict[str, slice] = {}
    choices: list[tuple[int, ...]] = []
    for name in order:
        slices[name] = slice(len(choices), len(choices) + len(groups[name]))
        choices += groups[name]
    return slices, tuple(choices), frozen_ints([len(c) for c in choices])


@dataclass(frozen=True, eq=False)
class GeneLayoutBase(ABC):
    """Columns of one space's gene rows. A family's layout adds ``encode``/``decode``, ``active``,
    ``terms``, ``term_active`` and ``cheapest``; everything here reads only ``choices`` (per gene, so a
    stage may have its own depth choices) and the resolution column."""

    space: Any
    slices: Mapping[str, slice]  # columns of each gene group
    choices: tuple[tuple[int, ...], ...]  # choice values of each gene
    sizes: np.ndarray  # number of choices of each gene

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

    def encode_many(self, archs: Sequence[Any]) -> np.ndarray:
        return np.stack([self.encode(a) for a in archs]) if len(archs) else np.zeros((0, self.genes), np.int64)

    @abstractmethod
    def encode(self, arch: Any, source: str = "arch") -> np.ndarray:
        """Arch -> row of choice indices; ``SpaceError`` naming ``source`` if a value is no choice."""

    @abstractmethod
    def decode(self, row: np.ndarray) -> Any:
        """Row of choice indices -> arch."""

    def uniform(self, resolution: int, values: Mapping[str, int]) -> Any:
        """The arch taking ``values[group]`` in every gene of each named group (groups are named as the
        space's ``elastic_dims()``), at ``resolution``; the other genes take their first choice."""
        row = np.zeros(self.genes, dtype=np.int64)
        row[self.resolution] = self.choices[self.resolution].index(resolution)
        for group, value in values.items():
            for col in range(*self.slices[group].indices(self.genes)):
                row[col] = self.choices[col].index(value)
        return self.decode(row)

    @abstractmethod
    def active(self, rows: np.ndarray) -> np.ndarray:
        """(n, genes) mask of the genes each row's subnet depends on."""

    def canonical(self, rows: np.ndarray) -> np.ndarray:
        """Rows with the genes they do not use set to choice 0: one row per distinct subnet."""
        rows = np.array(rows, dtype=np.int64).reshape(-1, self.genes)
        rows *= self.active(rows)
        return rows

    # ----------------------------------------------------------------- random operators (OFA's)
    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` uniform random archs as gene rows."""
        return (rng.random((n, self.genes)) * self.sizes).astype(np.int64)

    def mutate(
        self, rows: np.ndarray, rng: np.random.Generator, prob: float = 0.1, resolution_prob: float = 0.5
    ) -> np.ndarray:
        """Redraw each gene of rows (..., genes) with probability ``prob`` (the resolution with
        ``resolution_prob``), as OFA.

        One uniform ``u`` per gene decides both: the gene is redrawn when ``u < p``, and then ``u / p``
        is uniform on [0, 1), so it picks the new choice (half the random numbers of two draws).
        """
        p = np.full(rows.shape[-1], prob)
        p[self.resolution] = resolution_prob
        scale = np.divide(self.sizes, p, out=np.zeros(len(p)), where=p > 0)
        u = rng.random(rows.shape)
        fresh = np.minimum(u * scale, self.sizes - 1).astype(np.int64)  # u * scale rounds up to a size at worst
        return np.where(u < p, fresh, rows)

    def crossover(self, a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Uniform crossover: each gene from either parent with probability 1/2."""
        return np.where(rng.integers(0, 2, a.shape, dtype=np.bool_), a, b)
