"""What a search looks for (`SearchConfig`: budgets, caps, seed) and how it evolves (`EvolutionConfig`);
the fields are ``ofa search``'s options."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ofa.utils.errors import OFAError
from ofa.utils.fields import field_label
from search.latency import check_known_dtype


@dataclass(frozen=True)
class EvolutionConfig:
    """Search hyper-parameters; the defaults are those of the official OFA EvolutionFinder."""

    population: int = field(default=100, metadata={"help": "subnets per generation"})
    generations: int = field(default=500, metadata={"help": "generations"})
    parent_ratio: float = field(default=0.25, metadata={"help": "share of the population kept as parents"})
    mutation_ratio: float = field(
        default=0.5, metadata={"help": "share of the children made by mutation (the rest by crossover)"}
    )
    mutate_prob: float = field(default=0.1, metadata={"help": "per-gene mutation probability"})
    resolution_prob: float = field(default=0.5, metadata={"help": "resolution mutation probability"})
    max_redraws: int = 200  # then a child that still breaks a constraint is a copy of its (feasible) parent

    def __post_init__(self) -> None:
        if self.population < 2:
            raise OFAError(f"{field_label(EvolutionConfig, 'population')} must be at least 2, got {self.population}")
        if self.generations < 0:
            raise OFAError(f"{field_label(EvolutionConfig, 'generations')} must be >= 0, got {self.generations}")
        for name in ("parent_ratio", "mutation_ratio", "mutate_prob", "resolution_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise OFAError(f"{field_label(EvolutionConfig, name)} must be in [0, 1], got {getattr(self, name)}")
        if self.n_parents < 1:
            raise OFAError(
                f"{field_label(EvolutionConfig, 'parent_ratio')} {self.parent_ratio} leaves no parent in a "
                f"population of {self.population}"
            )

    @property
    def n_parents(self) -> int:
        return round(self.parent_ratio * self.population)

    @property
    def n_mutations(self) -> int:
        return round(self.mutation_ratio * self.population)


@dataclass(frozen=True)
class SearchConfig:
    """What to search for: latency budgets (ms), optional MACs/params caps, the seed, the dtype the model ships
    in (its table and predictor must be of it) and the evolution."""

    targets_ms: tuple[float, ...] = field(
        metadata={"flag": "--latency-ms", "metavar": "MS", "help": "one or more latency budgets in ms"}
    )
    max_macs: float | None = field(
        default=None, metadata={"metavar": "M", "help": "also cap multiply-accumulates (e.g. 300M)"}
    )
    max_params: float | None = field(default=None, metadata={"metavar": "P", "help": "also cap parameters (e.g. 5M)"})
    seed: int = field(default=0, metadata={"help": "seed (same seed, same answer)"})
    dtype: Literal["float32", "int8"] = field(
        default="float32",
        metadata={
            "help": "what the shipped model computes in: int8 ranks subnets by an INT8 table's latency and an "
            "INT8 predictor's top-1 (`ofa lut build --dtype int8`, `ofa predictor collect --dtype int8`)"
        },
    )
    evolution: EvolutionConfig = field(default_factory=EvolutionConfig)

    def __post_init__(self) -> None:
        check_known_dtype(self.dtype, field_label(SearchConfig, "dtype"))
        targets = tuple(dict.fromkeys(float(t) for t in self.targets_ms))
        label = field_label(SearchConfig, "targets_ms")
        if not targets:
            raise OFAError(f"{label}: give at least one latency target")
        if not all(0 < t < float("inf") for t in targets):
            raise OFAError(f"{label}: latency targets must be positive numbers of milliseconds, got {list(targets)}")
        for name in ("max_macs", "max_params"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise OFAError(f"{field_label(SearchConfig, name)} must be positive, got {value}")
        object.__setattr__(self, "targets_ms", targets)
