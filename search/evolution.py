"""Evolutionary search under device constraints: OFA's EvolutionFinder, vectorized.

The algorithm and defaults are the official ones (population 100, 500 generations, top 25% become
parents, 50% of children by mutation with per-gene probability 0.1 and resolution probability
0.5, the rest by uniform crossover, a child that breaks a constraint is redrawn from the same
parents). Here a population is an integer array of gene rows (the family's gene layout): mutation,
crossover and the constraint check act on whole arrays, latency/MACs/params are gathers over dense
tables, and accuracy is one batched predictor call per generation. What to search for is
`search.search_config`; what a search answers, and its saving, is `search.result`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import numpy as np
from tqdm import tqdm

from ofa.families.family import Arch, Space
from ofa.families.genes import GeneLayoutBase
from ofa.families.registry import layout_of
from ofa.utils.errors import OFAError
from ofa.utils.fields import flags_of
from search.dense import DenseCost, macs_model, params_model
from search.pareto import ParetoFront
from search.result import Evolution, SearchResult, TargetResult
from search.search_config import EvolutionConfig, SearchConfig

INIT_BATCH = 1024
FIRST_DRAWS = 4  # candidates per child in the first round of drawing (most children are feasible)
REDRAW_BATCH = 16  # candidates per child in each further round (the few children left are hard to place)
INIT_BATCHES = 1000  # random draws for the first population before seeding it with the cheapest subnets
CLOUD_POINTS = 4000  # evaluated subnets drawn (grey) behind the front in the plot


class RowModel(Protocol):
    """Anything that scores a population of gene rows: a predictor, a latency table, a DenseCost."""

    def predict_batch(self, rows: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class Limit:
    """One constraint: ``cost(arch) <= value``; ``label`` names it in errors (e.g. the CLI flag)."""

    name: str
    value: float
    cost: RowModel
    label: str


class SubsetPredictor:
    """Scores gene rows of ``sub`` with a predictor of ``full``, where ``sub`` is ``full`` with only
    some of its resolutions (those a latency table measured): only the resolution index differs."""

    def __init__(self, predictor: RowModel, full: Space, sub: Space) -> None:
        if (
            not set(sub.resolutions) <= set(full.resolutions)
            or {**sub.to_dict(), "resolutions": list(full.resolutions)} != full.to_dict()
        ):
            raise OFAError(f"space {sub.fingerprint()} is not space {full.fingerprint()} with fewer resolutions")
        self.predictor, self.column = predictor, layout_of(sub).resolution
        self.resolution_index = np.array([full.resolutions.index(r) for r in sub.resolutions])

    def predict_batch(self, rows: np.ndarray) -> np.ndarray:
        rows = np.array(rows, dtype=np.int64, ndmin=2)
        rows[:, self.column] = self.resolution_index[rows[:, self.column]]
        return self.predictor.predict_batch(rows)


def dense_of(cost: RowModel) -> DenseCost | None:
    """The dense table behind a cost model, if it has one (DenseCost, LatencyTable)."""
    if isinstance(cost, DenseCost):
        return cost
    dense = getattr(cost, "dense", None)
    if callable(dense):
        dense = dense()
    return dense if isinstance(dense, DenseCost) else None


def cheapest_rows(space: Space, cost: RowModel) -> np.ndarray:
    """The cheapest subnet at each resolution, exactly, from the dense table (or the min arch per resolution)."""
    dense = dense_of(cost)
    if dense is None:
        return layout_of(space).encode_many([space.min_arch(r) for r in space.resolutions])
    return dense.cheapest_rows()


def check_reachable(space: Space, limits: Sequence[Limit]) -> None:
    """Raise, saying the smallest achievable value, when a budget is below every subnet's cost."""
    for lim in limits:
        rows = cheapest_rows(space, lim.cost)
        costs = np.asarray(lim.cost.predict_batch(rows))
        i = int(np.argmin(costs))
        if lim.value < costs[i]:
            raise OFAError(
                f"{lim.label} {_fmt(lim.value, lim.name)} is below the smallest achievable "
                f"{_fmt(costs[i], lim.name)} (the cheapest subnet, at resolution {space.resolutions[rows[i, 0]]})"
            )


def _fmt(value: float, name: str) -> str:
    if name == "latency_ms":
        return f"{value:.4g} ms"
    return f"{value / 1e6:.4g}M" if value >= 1e5 else f"{value:.4g}"


class _Feasible:
    """Vectorized constraint check over gene rows."""

    def __init__(self, limits: Sequence[Limit]) -> None:
        self.limits = list(limits)

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        ok = np.ones(len(rows), dtype=bool)
        for lim in self.limits:
            ok &= np.asarray(lim.cost.predict_batch(rows)) <= lim.value
        return ok


class _Scores:
    """Predicted top-1 per distinct subnet: each is sent to the predictor once (one batch per generation).

    Late generations are mostly re-discovered subnets, so this skips most predictor work. A subnet is
    known by the bytes of its canonical row (packed to uint8 when the choices allow); ``seen`` gives
    the distinct subnets in the order they were first scored.
    """

    def __init__(self, space: Space, predictor: RowModel) -> None:
        self.layout, self.predictor = layout_of(space), predictor
        self.dtype = np.uint8 if self.layout.sizes.max() <= 256 else np.int64
        self.key = np.dtype((np.void, np.dtype(self.dtype).itemsize * self.layout.genes))
        self.known: dict[bytes, float] = {}
        self._rows: list[np.ndarray] = []
        self._top1: list[np.ndarray] = []

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        canon = self.layout.canonical(rows)
        keys = np.ascontiguousarray(canon, dtype=self.dtype).view(self.key).ravel().tolist()
        known = self.known
        new = {k: i for i, k in enumerate(keys) if k not in known}  # distinct, in first-seen order
        if new:
            fresh = canon[list(new.values())]
            top1 = np.asarray(self.predictor.predict_batch(fresh), dtype=np.float64)
            known.update(zip(new, top1.tolist()))
            self._rows.append(fresh)
            self._top1.append(top1)
        return np.fromiter(map(known.__getitem__, keys), np.float64, len(keys))

    def seen(self) -> tuple[np.ndarray, np.ndarray]:
        """(canonical rows, predicted top-1) of every distinct subnet scored, first-scored first."""
        return np.concatenate(self._rows), np.concatenate(self._top1)


def _redraw(
    make: Callable[[np.ndarray, int], np.ndarray], n: int, ok: _Feasible, fallback: np.ndarray, max_redraws: int
) -> np.ndarray:
    """One feasible child per slot: ``make(slots, draws)`` gives (draws, len(slots), genes) candidates,
    drawn again for the slots none of whose candidates meets the constraints.

    Each round draws a few candidates per unfinished child at once (FIRST_DRAWS, then REDRAW_BATCH)
    and keeps the first feasible one in draw order: the same distribution as redrawing one at a time
    (OFA), with a few vectorized rounds instead of many. After ``max_redraws`` draws a child is ``fallback``.
    """
    out = fallback.copy()
    todo = np.arange(n)
    drawn, budget = 0, max(max_redraws, 1)
    while len(todo) and drawn < budget:
        draws = min(REDRAW_BATCH if drawn else FIRST_DRAWS, budget - drawn)
        drawn += draws
        cand = make(todo, draws)
        good = ok(cand.reshape(-1, cand.shape[-1])).reshape(draws, len(todo))
        found = good.any(0)
        out[todo[found]] = cand[good.argmax(0)[found], np.flatnonzero(found)]
        todo = todo[~found]
    return out


def initial_population(
    space: Space, n: int, ok: _Feasible, rng: np.random.Generator, limits: Sequence[Limit]
) -> np.ndarray:
    """``n`` uniform random feasible subnets (rejection sampling, as OFA's random_valid_sample).

    Under a budget so tight that random draws almost never meet it, the population is completed
    with the cheapest subnets (per resolution and per cost), which mutation then explores from.
    """
    layout = layout_of(space)
    found, total = [], 0
    for _ in range(INIT_BATCHES):
        rows = layout.sample(INIT_BATCH, rng)
        rows = rows[ok(rows)]
        found.append(rows)
        total += len(rows)
        if total >= n:
            return np.concatenate(found)[:n]
    seeds = np.concatenate([cheapest_rows(space, lim.cost) for lim in limits])
    seeds = seeds[ok(seeds)]
    if total == 0 and not len(seeds):
        labels = " and ".join(f"{lim.label} {_fmt(lim.value, lim.name)}" for lim in limits)
        raise OFAError(f"no subnet meets {labels} together (each alone is reachable); relax one of them")
    pool = np.concatenate([*found, seeds])
    return pool[np.arange(n) % len(pool)]


def _children(
    layout: GeneLayoutBase, parents: np.ndarray, rng: np.random.Generator, config: EvolutionConfig, ok: _Feasible
) -> np.ndarray:
    """A generation's feasible children: mutants of random parents, then uniform crossovers of random pairs.

    Both kinds are drawn together, so one constraint check per round covers them; the operators act on
    broadcast views of the parents (every draw of a child from the same parents, without copies).
    """
    n_mut = config.n_mutations
    pick = rng.integers(len(parents), size=n_mut)
    pa, pb = rng.integers(len(parents), size=(2, config.population - n_mut))
    base, a, b = parents[pick], parents[pa], parents[pb]

    def make(slots: np.ndarray, draws: int) -> np.ndarray:
        m, c = slots[slots < n_mut], slots[slots >= n_mut] - n_mut  # slots are sorted: mutants first
        mutants = layout.mutate(
            np.broadcast_to(base[m], (draws, *base[m].shape)), rng, config.mutate_prob, config.resolution_prob
        )
        shape = (draws, len(c), a.shape[1])
        crossed = layout.crossover(np.broadcast_to(a[c], shape), np.broadcast_to(b[c], shape), rng)
        return np.concatenate([mutants, crossed], axis=1)

    return _redraw(make, config.population, ok, np.concatenate([base, a]), config.max_redraws)


def evolve(
    space: Space,
    predictor: RowModel,
    limits: Sequence[Limit],
    config: EvolutionConfig,
    rng: np.random.Generator,
    on_generation: Callable[[int, float], None] | None = None,
) -> Evolution:
    """Run the evolution for one set of constraints (see the module docstring)."""
    start = time.perf_counter()
    check_reachable(space, limits)
    layout = layout_of(space)
    ok = _Feasible(limits)
    n_par = config.n_parents
    score = _Scores(space, predictor)
    pop = initial_population(space, config.population, ok, rng, limits)
    acc = score(pop)
    history = np.empty(config.generations + 1)
    for g in range(config.generations):
        order = np.argsort(-acc, kind="stable")[:n_par]
        parents, parent_acc = pop[order], acc[order]
        history[g] = parent_acc[0]
        if on_generation is not None:
            on_generation(g, float(parent_acc[0]))
        children = _children(layout, parents, rng, config, ok)
        child_acc = score(children)
        pop, acc = np.concatenate([parents, children]), np.concatenate([parent_acc, child_acc])
    best = int(np.argmax(acc))
    history[-1] = acc[best]
    return Evolution(pop[best].copy(), float(acc[best]), history, *score.seen(), time.perf_counter() - start)


@lru_cache(maxsize=8)
def cost_models(space: Space) -> tuple[DenseCost, DenseCost]:
    """(MACs, params) dense tables of a space, built once per space."""
    return macs_model(space), params_model(space)


def unique_rows(rows: np.ndarray) -> np.ndarray:
    """Indices of the first occurrence of each distinct gene row (sorted as bytes: fast and exact)."""
    rows = np.asarray(rows)
    dtype = np.uint8 if rows.max(initial=0) < 256 else np.int64
    packed = np.ascontiguousarray(rows.astype(dtype))
    keys = packed.view(np.dtype((np.void, packed.dtype.itemsize * packed.shape[1]))).ravel()
    return np.unique(keys, return_index=True)[1]


def run_search(
    space: Space, predictor: RowModel, latency: RowModel, cfg: SearchConfig, progress: bool = False
) -> SearchResult:
    """Most accurate subnet (by ``predictor``) per latency budget, under optional MACs/params caps.

    ``latency`` maps gene rows to ms (a LatencyTable or DenseCost). Each budget runs its own
    search, seeded from (seed, budget); its answer is the best subnet that any of the searches
    evaluated within that budget (a larger budget's search often finds small subnets too).
    Raises ``OFAError`` when a budget or cap cannot be met by any subnet.
    """
    config, seed, max_macs, max_params = cfg.evolution, cfg.seed, cfg.max_macs, cfg.max_params
    targets = list(cfg.targets_ms)
    macs, params = cost_models(space)
    caps = [
        Limit(name, value, model, flags_of(SearchConfig, f"max_{name}")[0])
        for name, value, model in (("macs", max_macs, macs), ("params", max_params, params))
        if value is not None
    ]
    per_target = [[Limit("latency_ms", t, latency, "latency target"), *caps] for t in targets]
    for limits in per_target:
        check_reachable(space, limits)

    histories, seen_rows, seen_top1 = [], [], []
    bar = tqdm(total=len(targets) * config.generations, desc="search", unit="gen", disable=not progress)
    for target, limits in zip(targets, per_target):
        rng = np.random.default_rng([seed, round(target * 1e6)])
        evo = evolve(space, predictor, limits, config, rng, on_generation=lambda g, best: bar.update())
        histories.append((evo.history, evo.seconds))
        seen_rows.append(evo.rows)
        seen_top1.append(evo.top1)
    bar.close()

    layout = layout_of(space)
    rows = np.concatenate(seen_rows)  # canonical rows (Evolution.rows)
    first = unique_rows(rows)
    rows, top1 = rows[first], np.concatenate(seen_top1)[first]
    costs = {
        "latency_ms": np.asarray(latency.predict_batch(rows), dtype=np.float64),
        "macs": macs.predict_batch(rows),
        "params": params.predict_batch(rows),
    }
    results = [
        TargetResult(target, _best_within(layout, rows, top1, costs, limits), history, seconds)
        for target, limits, (history, seconds) in zip(targets, per_target, histories)
    ]
    front = ParetoFront.from_evaluated(space, rows, top1, costs["latency_ms"], costs["macs"], costs["params"])
    sample = np.random.default_rng(seed).permutation(len(rows))[:CLOUD_POINTS]
    cloud = (costs["latency_ms"][sample], top1[sample])
    return SearchResult(space, results, front, cloud, config, seed, max_macs, max_params, evaluated=len(rows))


def _best_within(
    layout: GeneLayoutBase, rows: np.ndarray, top1: np.ndarray, costs: dict[str, np.ndarray], limits: Sequence[Limit]
) -> Arch:
    """The most accurate evaluated subnet that meets every limit (any search's, its own at least)."""
    ok = np.logical_and.reduce([costs[lim.name] <= lim.value for lim in limits])
    i = int(np.flatnonzero(ok)[np.argmax(top1[ok])])
    return layout.decode(rows[i]).with_extra(
        {
            "predicted_top1": float(top1[i]),
            "latency_ms": float(costs["latency_ms"][i]),
            "macs": int(costs["macs"][i]),
            "params": int(costs["params"][i]),
        }
    )
