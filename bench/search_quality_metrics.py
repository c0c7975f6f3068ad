"""The figures of `bench.search_quality` from measured accuracies, as plain arrays (so the tests can drive
them with an accuracy function whose answers are known): which of K subnets fit a budget, the best of
them chosen on one half of the images and scored on the other, a found subnet's regret and rank, the
standard error of one measurement, what caused a large regret, and how much of a measured front
another front matches or dominates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from search.pareto import non_dominated

REGRET_POINTS = 0.3  # the bar: regret <= max(this, one standard error of the measurement)
LATENCY_SLACK = 0.10  # measured latency within budget x (1 + this)
RANKS_TAU = 0.3  # below this test-retest tau the truth cannot rank the K subnets: regrets are noise


@dataclass(frozen=True)
class Best:
    """The split-half best subnet under a budget: ``index`` into the K, its picking and its scored accuracy."""

    index: int
    picked_on: float
    top1: float
    fit: int  # how many of the K fit the budget


def split_half_best(latency: np.ndarray, pick: np.ndarray, score: np.ndarray, budget: float) -> Best | None:
    """The subnet most accurate on ``pick`` among those with ``latency <= budget``, scored on ``score``
    (disjoint images, so a subnet lucky on the picking half does not set the bar); None if none fits."""
    fit = np.flatnonzero(np.asarray(latency) <= budget)
    if not len(fit):
        return None
    i = int(fit[np.argmax(np.asarray(pick)[fit])])
    return Best(i, float(pick[i]), float(score[i]), len(fit))


def rank_among(top1: float, latency: np.ndarray, score: np.ndarray, budget: float) -> int:
    """1 + how many of the subnets within ``budget`` score strictly higher than ``top1`` (1: none does)."""
    fit = np.asarray(latency) <= budget
    return 1 + int(np.sum(np.asarray(score)[fit] > top1))


def standard_error(top1: float, count: int) -> float:
    """Binomial standard error (points) of a top-1 (percent) measured on ``count`` images."""
    p = min(max(top1 / 100.0, 0.0), 1.0)
    return 100.0 * math.sqrt(p * (1.0 - p) / count) if count else float("nan")


def within_bar(regret: float, se: float) -> bool:
    """The issue's bar on one found subnet: regret <= max(REGRET_POINTS, one standard error)."""
    return regret <= max(REGRET_POINTS, se)


def cause(regret: float, se: float, predicted_found: float, predicted_best: float) -> str:
    """Why a found subnet misses the bar: ``ok``; ``search`` when the predictor itself rates the best subnet
    higher (the search did not reach it); ``noise`` when the regret is within two standard errors of a
    difference of two measurements (sqrt(2) SE each); else ``predictor`` (it ranked them wrongly)."""
    if within_bar(regret, se):
        return "ok"
    if predicted_best > predicted_found:
        return "search"
    return "noise" if regret <= 2 * math.sqrt(2) * se else "predictor"


def front_indices(latency: np.ndarray, top1: np.ndarray) -> np.ndarray:
    """Indices of the non-dominated points (latency down, top-1 up), sorted by latency."""
    lat, acc = np.asarray(latency, dtype=np.float64), np.asarray(top1, dtype=np.float64)
    keep = non_dominated(np.stack([lat, -acc], 1))
    return keep[np.lexsort((-acc[keep], lat[keep]))]


def front_share(
    ref_latency: np.ndarray, ref_top1: np.ndarray, latency: np.ndarray, top1: np.ndarray, tol: float = 0.0
) -> float:
    """Share of the reference points that some point of the other set matches or dominates: no slower and
    at least as accurate (less ``tol`` points)."""
    ref_lat, ref_acc = np.asarray(ref_latency)[:, None], np.asarray(ref_top1)[:, None]
    lat, acc = np.asarray(latency)[None, :], np.asarray(top1)[None, :]
    if not ref_lat.size:
        return float("nan")
    covered = ((lat <= ref_lat) & (acc >= ref_acc - tol)).any(1)
    return float(covered.mean())
