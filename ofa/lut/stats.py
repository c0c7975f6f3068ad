"""The statistics of timing: a block's figure, a model's figure from its blocks, and their noise.

Kept apart from the protocols (`ofa.lut.timing`) that call them, so the estimators can be read, and
tested with injected timings, on their own. See `ofa.lut.timing` for why a low quantile of time-sized
blocks is the default figure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from scipy.stats import binom

Stats = dict[str, float | int]  # {mean_ms: the protocol's figure, std_ms, count, spread_pct[, ci_pct, steal_blocks]}
PREEMPTED_SHARE, PREEMPTED_MIN_MS = 0.05, 0.02  # wall - CPU time above max(5% of the call, 20 us): preempted
MIN_CLEAN = 0.25  # share of a block's calls that must run unpreempted for the block to count
CONFIDENCE = 0.95


def host_steal_ticks() -> int:
    """CPU time the hypervisor gave to other guests so far (``steal`` of ``/proc/stat``, in clock ticks);
    0 where the host does not report it."""
    try:
        with open("/proc/stat") as f:
            values = f.readline().split()
    except OSError:
        return 0
    return int(values[8]) if len(values) > 8 and values[0] == "cpu" else 0


def block_figure(wall_ms: np.ndarray, cpu_ms: np.ndarray, clock: str, one_thread: bool = True) -> tuple[float, bool]:
    """A block's median call and whether the block counts: on the wall clock, over the calls not preempted.

    A wall-clock block with fewer than ``MIN_CLEAN`` calls left gives its plain median and does not count.
    Only a model running in the calling thread alone (``one_thread``) can be told preempted.
    """
    if clock == "thread":
        return float(np.median(cpu_ms)), True
    if not one_thread:
        return float(np.median(wall_ms)), True
    clean = wall_ms - cpu_ms <= np.maximum(PREEMPTED_SHARE * wall_ms, PREEMPTED_MIN_MS)
    if clean.mean() < MIN_CLEAN:
        return float(np.median(wall_ms)), False
    return float(np.median(wall_ms[clean])), True


def blocks_stats(blocks: Sequence[tuple[float, bool]], wanted: int) -> Stats:
    """`repeat_stats` of the blocks that count; of all of them, with spread 100%, where under half the
    ``wanted`` blocks count."""
    kept = [figure for figure, counts in blocks if counts]
    if 2 * len(kept) < wanted:
        return {**repeat_stats([figure for figure, _ in blocks]), "spread_pct": 100.0}
    return repeat_stats(kept)


def repeat_stats(figures_ms: Sequence[float]) -> Stats:
    """A model's figure from its repeated ones (block medians): median, std, count, and spread (IQR %)."""
    x = np.asarray(figures_ms, dtype=np.float64)
    mid = float(np.median(x))
    q1, q3 = np.percentile(x, [25, 75])
    return {
        "mean_ms": mid,
        "std_ms": float(x.std()),
        "count": len(x),
        "spread_pct": float(100 * (q3 - q1) / mid) if mid > 0 else 0.0,
    }


def quantile_stats(figures_ms: Sequence[float], q: float) -> Stats:
    """The ``q`` quantile of a model's block medians and its 95% interval from order statistics.

    The interval runs from the l-th to the u-th smallest block, l and u the binomial(n, q) quantiles
    around n*q: it holds the true quantile with at least 95% probability whatever the blocks'
    distribution, and it narrows as blocks are added (~1/sqrt(n)) even where their spread does not.
    ``ci_pct`` is its half-width in % of the figure.
    """
    x = np.sort(np.asarray(figures_ms, dtype=np.float64))
    n = len(x)
    figure = float(np.quantile(x, q))
    lo = int(binom.ppf((1 - CONFIDENCE) / 2, n, q))  # 0-based index of the l-th smallest
    hi = min(n - 1, int(binom.ppf(1 - (1 - CONFIDENCE) / 2, n, q)))
    low, high = float(x[max(0, lo - 1)]), float(x[hi])
    base = repeat_stats(x)
    return {
        **base,
        "mean_ms": figure,
        "median_ms": base["mean_ms"],
        "ci_low_ms": low,
        "ci_high_ms": high,
        "ci_pct": float(100 * (high - low) / 2 / figure) if figure > 0 else 0.0,
    }


def noise_pct(stats: Mapping[str, Stats], names: Sequence[str]) -> float:
    """The measurement's noise: the widest interval (``ci_pct``, `NOISE_CRITERION`) among the models
    ``names``; the block spread for timings without one (median estimator, interleaved rounds)."""
    return max((float(stats[n].get("ci_pct", stats[n]["spread_pct"])) for n in names), default=0.0)


def spread_pct(stats: Mapping[str, Stats], names: Sequence[str]) -> float:
    """The host's burstiness: the largest block spread (interquartile range / median) among ``names``."""
    return max((float(stats[n]["spread_pct"]) for n in names), default=0.0)


def quiet_rounds(samples_ms: np.ndarray, keep: float) -> np.ndarray:
    """Indices of the ``keep`` share of rounds (columns) with the lowest mean log-slowdown over models."""
    rel = np.log(np.maximum(samples_ms, 1e-12) / np.median(samples_ms, axis=1, keepdims=True))
    n = max(1, round(keep * samples_ms.shape[1]))
    return np.sort(np.argsort(rel.mean(axis=0), kind="stable")[:n])


def trimmed_stats(samples_ms: Sequence[float], trim: float) -> Stats:
    """Mean and std after dropping the fastest and slowest ``trim`` share of the samples."""
    x = np.sort(np.asarray(samples_ms, dtype=np.float64))
    cut = int(len(x) * trim)
    kept = x[cut : len(x) - cut] if len(x) - 2 * cut > 0 else x
    return {"mean_ms": float(kept.mean()), "std_ms": float(kept.std()), "count": len(kept)}


def block_ratio(block: tuple[float, bool], around: list[tuple[float, bool]]) -> float | None:
    """A model block's figure over the geometric mean of the reference blocks around it that count."""
    refs = [figure for figure, counts in around if counts and figure > 0]
    if not block[1] or not refs:
        return None
    return block[0] / math.exp(sum(map(math.log, refs)) / len(refs))
