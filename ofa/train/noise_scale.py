"""Gradient noise scale (critical batch size) from gradient norms at two batch sizes.

McCandlish et al. 2018, "An Empirical Model of Large-Batch Training", Appendix A.1: with
|G_b|² the squared norm of a gradient averaged over b samples, E|G_b|² = |G|² + tr(Σ)/b, so two
batch sizes b_small < b_big give unbiased estimates

    |G|²  ≈ (b_big |G_big|² − b_small |G_small|²) / (b_big − b_small)
    tr(Σ) ≈ (|G_small|² − |G_big|²) / (1/b_small − 1/b_big)

whose ratio, each smoothed by its own moving average first, is the simple noise scale
B_simple = tr(Σ)/|G|², an estimate of the critical batch size. During training the small
batches are micro-batches (or ranks) and the big one their accumulated sum: the measurement
costs a copy of the gradients, no extra forward or backward pass.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import torch
from torch import nn


class _Average:
    """Exponential moving average with bias correction; decay 1 is the plain running mean."""

    def __init__(self, decay: float) -> None:
        self.decay, self.num, self.den = decay, 0.0, 0.0

    def update(self, value: float) -> None:
        self.num = self.decay * self.num + value
        self.den = self.decay * self.den + 1.0

    @property
    def value(self) -> float | None:
        return self.num / self.den if self.den else None


def unbiased_estimates(small_sq: float, big_sq: float, b_small: float, b_big: float) -> tuple[float, float]:
    """(|G|², tr(Σ)) from one pair of squared gradient norms at batch sizes b_small < b_big."""
    if not b_big > b_small > 0:
        raise ValueError(f"need b_big > b_small > 0, got {b_big}, {b_small}")
    g2 = (b_big * big_sq - b_small * small_sq) / (b_big - b_small)
    trace = (small_sq - big_sq) / (1.0 / b_small - 1.0 / b_big)
    return g2, trace


def log_interval(value: float, log_sd: float, z: float = 1.0) -> tuple[float, float]:
    """value · exp(∓z·log_sd), the interval of a log-normal estimate: z = 1 is 68%, 2 about 95%."""
    spread = math.exp(z * log_sd) if math.isfinite(log_sd) else math.inf
    return value / spread, value * spread


def b_simple_log_sd(g2: list[float], trace: list[float]) -> float:
    """Standard error of ln B_simple = ln(mean tr(Σ) / mean |G|²) over independent measurements.

    The delta method on the ratio of two means: var ln(T̄/Ḡ) ≈ (s_T²/T̄² + s_G²/Ḡ² − 2 s_TG/(T̄Ḡ)) / n,
    with the sample (co)variances of the per-measurement estimates. inf: fewer than two
    measurements, or a mean |G|² that is not positive (the ratio is not pinned down).
    """
    n = len(g2)
    if n < 2 or n != len(trace):
        return math.inf
    mg, mt = sum(g2) / n, sum(trace) / n
    if mg <= 0 or mt <= 0:
        return math.inf
    var_g, var_t = statistics.variance(g2, mg), statistics.variance(trace, mt)
    var = (var_t / mt**2 + var_g / mg**2 - 2 * statistics.covariance(g2, trace) / (mt * mg)) / n
    return math.sqrt(max(var, 0.0))


class NoiseScaleEstimator:
    """Moving averages of the unbiased |G|² and tr(Σ) estimates, and their ratio B_simple."""

    def __init__(self, ema: float = 0.95) -> None:
        self.ema = ema
        self.reset()

    def reset(self) -> None:
        self.g2, self.trace, self.updates = _Average(self.ema), _Average(self.ema), 0

    def update(self, small_sq: float, big_sq: float, b_small: float, b_big: float) -> tuple[float, float]:
        """One measurement: mean squared norm of b_small-sample gradients and squared norm of their
        average. Returns this measurement's own (|G|², tr(Σ)) estimates."""
        g2, trace = unbiased_estimates(small_sq, big_sq, b_small, b_big)
        self.g2.update(g2)
        self.trace.update(trace)
        self.updates += 1
        return g2, trace

    @property
    def b_simple(self) -> float | None:
        g2, trace = self.g2.value, self.trace.value
        if g2 is None or g2 <= 0:
            return None  # gradient too small to see through the noise yet
        return trace / g2

    def summary(self) -> dict[str, Any] | None:
        if not self.updates:
            return None
        return {
            "b_simple": self.b_simple,
            "trace_sigma": self.trace.value,
            "grad_sq": self.g2.value,
            "updates": self.updates,
        }

    def state_dict(self) -> dict[str, float]:
        return {
            "g2_num": self.g2.num,
            "g2_den": self.g2.den,
            "tr_num": self.trace.num,
            "tr_den": self.trace.den,
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.g2.num, self.g2.den = state["g2_num"], state["g2_den"]
        self.trace.num, self.trace.den = state["tr_num"], state["tr_den"]
        self.updates = int(state["updates"])


class MicroBatchGradNorms:
    """Squared norm of each micro-batch's own gradient, read off the accumulated ``.grad``.

    Call ``begin()`` before a micro-batch's backward passes and ``end(scale)`` after them; the
    micro-batch gradient is the change of ``.grad`` times ``scale`` (undoing loss scaling).
    """

    def __init__(self, params: list[nn.Parameter]) -> None:
        self.params = params
        self.sq_norms: list[float] = []
        self._before: list[torch.Tensor | None] = []

    @torch.no_grad()
    def begin(self) -> None:
        self._before = [None if p.grad is None else p.grad.detach().clone() for p in self.params]

    @torch.no_grad()
    def end(self, scale: float = 1.0) -> None:
        parts = [
            (p.grad if before is None else p.grad - before).double().square().sum()
            for p, before in zip(self.params, self._before)
            if p.grad is not None
        ]
        self.sq_norms.append(float(torch.stack(parts).sum()) * scale * scale if parts else 0.0)
        self._before = []

    @property
    def mean_sq(self) -> float:
        return sum(self.sq_norms) / len(self.sq_norms)


@torch.no_grad()
def grad_sq_norm(params: list[nn.Parameter], scale: float = 1.0) -> float:
    parts = [p.grad.double().square().sum() for p in params if p.grad is not None]
    return float(torch.stack(parts).sum()) * scale * scale if parts else 0.0


def suggest_batch_size(b_simple: float | None, train_size: int) -> int | None:
    """The one suggested global batch: a power of two near B_simple (past it, bigger batches stop
    paying off), at least 8 and at most a quarter of the training set."""
    if b_simple is None or not math.isfinite(b_simple) or b_simple <= 0:
        return None
    upper = max(8, 2 ** int(math.log2(max(8, train_size // 4))))
    return int(min(upper, max(8, 2 ** round(math.log2(b_simple)))))


def steps_factor(batch: float, new_batch: float, b_simple: float) -> float:
    """How many times fewer steps ``new_batch`` needs than ``batch`` to the same target, by the
    paper's S ∝ 1 + B_noise/B (also the factor its optimal learning rate grows by)."""
    return (1.0 + b_simple / batch) / (1.0 + b_simple / new_batch)


def batch_advice(global_batch: int, b_simple: float | None, train_size: int) -> str:
    """One line: where ``global_batch`` sits relative to B_simple and what changing it would buy."""
    suggested = suggest_batch_size(b_simple, train_size)
    if suggested is None:
        return (
            f"batch {global_batch}: the noise scale is not measurable yet (|G|² estimate <= 0), "
            "so there is no batch-size advice"
        )
    ratio = global_batch / b_simple
    head = f"batch {global_batch} is ~{ratio:.2g}× the noise scale (B_simple ≈ {b_simple:.0f})"
    if suggested == global_batch:
        return f"{head}: about the critical batch; keep it (suggested global batch {suggested})"
    factor = steps_factor(global_batch, suggested, b_simple)
    change = suggested / global_batch
    if change > 1:
        return (
            f"{head}: larger batches (more processes) cut steps almost linearly up to ~{1 / ratio:.2g}×; "
            f"suggested global batch {suggested}: ~{factor:.2g}× fewer steps for ~{change / factor:.2g}× the "
            "examples"
        )
    return (
        f"{head}: larger batches mostly add compute; suggested global batch {suggested} (fewer processes or "
        f"images per process): ~{1 / factor:.2g}× the steps for ~{factor / change:.2g}× fewer examples"
    )
