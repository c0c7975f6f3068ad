"""The decision rules of the progressive-shrinking benchmarks, fixed in code before any run is made.

Each rule is a pure function of validation figures (never test ones), so it is unit-tested on
synthetic numbers (``tests/test_ps_rules.py``) and the long runs cannot bend it:

- `lr_grid`: the scratch learning-rate grid at E epochs, extended by another factor of 2 while its
  best is at an edge, up to ``LR_EXTENSIONS`` times a side, flagged if the best is still at an edge.
- `ladder`: the convergence ladder E, 2E, 4E, ...: a doubling *gains* only if the seed-mean
  validation gain exceeds max(``GAIN_FLOOR``, ``SE_MULTIPLE`` x its standard error); the first
  doubling that does not gain stops it (converged at the epoch count it started from), and the
  doubling after the stop is run too, as a sensitivity row. Past ``one_seed_after`` epochs (the
  augmented study's long runs) one seed a level is enough: the gain's standard error then takes the
  seed variance pooled over the levels that have every seed.
- `best_level`: the twin a PS subnet is judged against, the epoch count with the best validation mean.
- `paper_split` / `compute_matched_total`: the paper's phase order scaled to a budget of epochs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

GAIN_FLOOR = 0.3  # top-1 points a doubling must gain (at least) to count as gaining
SE_MULTIPLE = 2.0  # ... and more than this many standard errors of the gain
MIN_SEEDS = 2  # seeds behind every figure a rule decides on
LR_FACTORS = (0.5, 1.0, 2.0)  # the scratch lr grid, times the first phase's lr
LR_EXTENSIONS = 2  # most extra factors of 2 beyond the grid on each side
MAX_DOUBLINGS = 3  # the ladder runs at most E x 2**3 epochs, its sensitivity row included
TARGET_POINTS = 0.5  # every PS subnet within this of its best twin (test), or better
BUDGET_RATIO = 4.0  # PS CPU seconds <= this x the largest twin's at its converged epoch count


@dataclass(frozen=True)
class GridState:
    """Where the lr grid stands: factors still to run, or the best one and whether it sits at an edge."""

    pending: tuple[float, ...]
    best: float | None = None
    at_edge: bool = False  # the best is the grid's lowest or highest factor after every allowed extension
    factors: tuple[float, ...] = ()  # every factor the rule asked for, in order
    val: Mapping[float, float] = field(default_factory=dict)  # their validation top-1, where run


def lr_grid(
    val: Mapping[float, float], factors: Sequence[float] = LR_FACTORS, extensions: int = LR_EXTENSIONS
) -> GridState:
    """The grid's state from the validation top-1 of each factor run so far (a missing factor: not run).

    Ties go to the factor nearer 1 (the recipe's rate)."""
    grid, low, high = sorted(factors), min(factors), max(factors)
    while True:
        pending = tuple(f for f in grid if f not in val)
        if pending:
            return GridState(pending, factors=tuple(grid), val={f: val[f] for f in grid if f in val})
        best = max(grid, key=lambda f: (val[f], -abs(math.log(f))))
        if best == grid[0] and len(grid) > 1 and grid[0] > low / 2**extensions:
            grid.insert(0, grid[0] / 2)
        elif best == grid[-1] and len(grid) > 1 and grid[-1] < high * 2**extensions:
            grid.append(grid[-1] * 2)
        else:
            edge = len(grid) > 1 and best in (grid[0], grid[-1])
            return GridState((), best, edge, tuple(grid), {f: val[f] for f in grid})


@dataclass(frozen=True)
class Gain:
    """One doubling of the ladder: the seed-mean validation gain, its standard error and the bar it had to pass."""

    start: int
    end: int
    mean: float
    se: float
    threshold: float

    @property
    def gains(self) -> bool:
        return self.mean > self.threshold


def doubling_gain(
    start: int, end: int, before: Sequence[float], after: Sequence[float], seed_var: float | None = None
) -> Gain:
    """Mean(after) - mean(before) with the standard error of a difference of two independent means
    (the seeds' runs at two lengths are not paired); the bar is max(GAIN_FLOOR, SE_MULTIPLE x SE).

    ``seed_var``: the seed variance of one run, used for both sides instead of their own (a side of one
    seed has none); without it each side needs ``MIN_SEEDS`` seeds."""
    if seed_var is None and min(len(before), len(after)) < MIN_SEEDS:
        raise ValueError(f"a doubling is judged on >= {MIN_SEEDS} seeds a side, got {len(before)} and {len(after)}")
    mean = statistics.mean(after) - statistics.mean(before)
    var_after, var_before = (
        (seed_var, seed_var) if seed_var is not None else (statistics.variance(after), statistics.variance(before))
    )
    se = math.sqrt(var_after / len(after) + var_before / len(before))
    return Gain(start, end, mean, se, max(GAIN_FLOOR, SE_MULTIPLE * se))


@dataclass(frozen=True)
class Ladder:
    """Where the convergence ladder stands."""

    levels: tuple[int, ...]  # the epoch counts the rule has asked for so far
    pending: tuple[int, ...]  # of those, the ones without every seed's figure yet
    gains: tuple[Gain, ...]  # each doubling judged, in order (the sensitivity row last)
    converged_epochs: int | None  # the epoch count a doubling from which did not gain; None: not (yet)

    @property
    def done(self) -> bool:
        return not self.pending

    @property
    def sensitivity(self) -> Gain | None:
        """The doubling run after the stop (None where the stop came at the ladder's bound)."""
        last = self.gains[-1] if self.gains else None
        return (
            last
            if last is not None and self.converged_epochs is not None and last.start > self.converged_epochs
            else None
        )


def seeds_at(epochs: int, seeds: int, one_seed_after: int | None = None) -> int:
    """Seeds a ladder level of ``epochs`` needs: all of them, or one past ``one_seed_after`` epochs."""
    return 1 if one_seed_after is not None and epochs > one_seed_after else seeds


def check_one_seed_after(one_seed_after: int | None, start: int) -> None:
    """ValueError unless the levels up to ``one_seed_after`` include the ladder's start: they give the seed
    variance the one-seed doublings are judged with."""
    if one_seed_after is not None and one_seed_after < start:
        raise ValueError(
            f"--one-seed-after must be >= --scratch-epochs ({start}): the first levels give the seed variance"
        )


def pooled_seed_variance(val: Mapping[int, Sequence[float]], seeds: int) -> float | None:
    """The mean seed variance of the levels run with ``seeds`` (>= 2) seeds; None where there is none."""
    variances = [statistics.variance(v[:seeds]) for v in val.values() if len(v) >= max(seeds, MIN_SEEDS)]
    return statistics.mean(variances) if variances else None


def ladder(
    start: int,
    val: Mapping[int, Sequence[float]],
    seeds: int = MIN_SEEDS,
    doublings: int = MAX_DOUBLINGS,
    one_seed_after: int | None = None,
) -> Ladder:
    """The ladder's state from the validation top-1 per seed at each epoch count run so far (one seed a
    level past ``one_seed_after`` epochs, see `seeds_at`)."""
    levels, gains, converged, level = [start], [], None, start

    def need(epochs: int) -> int:
        return seeds_at(epochs, seeds, one_seed_after)

    def complete(epochs: int) -> bool:
        return len(val.get(epochs, ())) >= need(epochs)

    while len(levels) <= doublings:
        levels.append(2 * level)
        if not (complete(level) and complete(2 * level)):
            break
        before, after = val[level][: need(level)], val[2 * level][: need(2 * level)]
        pooled = pooled_seed_variance(val, seeds) if min(len(before), len(after)) < seeds else None
        gains.append(doubling_gain(level, 2 * level, before, after, pooled))
        if converged is not None:
            break  # that was the sensitivity row
        if not gains[-1].gains:
            converged = level
        level *= 2
    pending = tuple(e for e in levels if not complete(e))
    return Ladder(tuple(levels), pending, tuple(gains), converged)


def best_level(val: Mapping[int, Sequence[float]], levels: Sequence[int]) -> int:
    """The epoch count whose seed-mean validation top-1 is highest (ties: the shorter run)."""
    return max(levels, key=lambda e: (statistics.mean(val[e]), -e))


# The official train_ofa_net.py after the full network: (phase, warmup epochs, epochs, lr / the kernel
# phase's, subnets per step); each phase's lr is cosine-annealed, with the teacher frozen.
PAPER_ORDER = (
    ("kernel", 5, 120, 1.0, 1),
    ("depth_1", 0, 25, 2.5e-3 / 3e-2, 2),
    ("depth_2", 5, 120, 7.5e-3 / 3e-2, 2),
    ("expand_1", 0, 25, 2.5e-3 / 3e-2, 4),
    ("expand_2", 5, 120, 7.5e-3 / 3e-2, 4),
)


def paper_split(total: int) -> tuple[int, ...]:
    """``total`` epochs split over the paper's phases in its proportions (largest remainder, >= 1 each;
    a phase the paper warms up gets >= 2: one warmup epoch and one more)."""
    least = [2 if warm else 1 for _, warm, *_ in PAPER_ORDER]
    if total < sum(least):
        raise ValueError(f"the paper's order needs >= {sum(least)} epochs, got {total}")
    weights = [warm + epochs for _, warm, epochs, *_ in PAPER_ORDER]
    exact = [total * w / sum(weights) for w in weights]
    split = [max(m, math.floor(x)) for m, x in zip(least, exact, strict=True)]
    by_remainder = sorted(range(len(split)), key=lambda i: (split[i] - exact[i], i))
    while sum(split) < total:
        split[by_remainder.pop(0)] += 1
    while sum(split) > total:  # the minimums pushed it over: take from the largest phases
        i = max((i for i in range(len(split)) if split[i] > least[i]), key=lambda i: (split[i], -i))
        split[i] -= 1
    return tuple(split)


def paper_passes(split: Sequence[int]) -> int:
    """Subnet forward/backward passes (per training image) of a split: epochs x subnets per step, summed."""
    return sum(e * phase[4] for e, phase in zip(split, PAPER_ORDER, strict=True))


def compute_matched_total(passes: int) -> int:
    """The total epochs whose `paper_split` makes ``passes`` subnet passes per image, or the nearest (ties: fewer)."""
    start = sum(2 if warm else 1 for _, warm, *_ in PAPER_ORDER)
    return min(range(start, 4 * passes + start), key=lambda t: (abs(paper_passes(paper_split(t)) - passes), t))


def ladder_text(twin: Mapping[str, Any]) -> str:
    """A twin's doublings as ``START->END +GAIN (bar THRESHOLD) VERDICT; ...``, VERDICT gains, stop or sensitivity."""
    parts = []
    for g in twin["gains"]:
        sens = twin["sensitivity"] and g["start"] == twin["sensitivity"]["start"]
        verdict = "sensitivity" if sens else ("gains" if g["gains"] else "stop")
        parts.append(f"{g['start']}->{g['end']} {g['mean']:+.2f} (bar {g['threshold']:.2f}) {verdict}")
    return "; ".join(parts) or "no ladder"
