"""The steps–examples trade-off of McCandlish et al. (2018) and the critical batch size it implies.

Training to a fixed target at batch size B takes S optimizer steps and E = B·S examples. Across
batch sizes the paper finds S/S_min − 1 = (E/E_min − 1)^−1, which is S(B) = S_min + E_min/B:
small batches need E_min examples (one step each is not wasted), large ones S_min steps. The
critical batch B_crit = E_min/S_min is where a run needs 2·S_min steps and 2·E_min examples; the
gradient noise scale B_simple (`ofa.train.noise_scale`) is the paper's cheap predictor of it.

The fit is on log S in the log-parameters: both stay positive, and each batch size counts by its
relative error, as steps-to-target scatter in proportion to themselves.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.optimize import OptimizeWarning, curve_fit

from ofa.train.noise_scale import log_interval
from ofa.utils.errors import OFAError


@dataclass(frozen=True)
class TradeoffFit:
    """Fitted S_min, E_min and B_crit = E_min/S_min; ``log_sd`` is the standard deviation of
    ln B_crit from the fit's covariance (inf: the points do not pin it down)."""

    s_min: float
    e_min: float
    b_crit: float
    log_sd: float
    points: int

    def interval(self, z: float = 1.0) -> tuple[float, float]:
        """B_crit · exp(∓z·log_sd): z = 1 is the 68% interval, 2 about 95%."""
        return log_interval(self.b_crit, self.log_sd, z)

    def steps(self, batch: float) -> float:
        """Steps to the target at ``batch`` on the fitted curve."""
        return self.s_min + self.e_min / batch

    def to_dict(self) -> dict[str, Any]:
        low, high = self.interval()
        return {**asdict(self), "b_crit_low": low, "b_crit_high": high}


def _log_steps(batch: np.ndarray, log_s_min: float, log_e_min: float) -> np.ndarray:
    return np.log(np.exp(log_s_min) + np.exp(log_e_min) / batch)


def fit_tradeoff(steps: Sequence[float], examples: Sequence[float]) -> TradeoffFit:
    """Fit S = S_min + E_min/B to (steps, examples) pairs, one per batch size (B = examples/steps).

    Raises `OFAError` for fewer than 3 points, non-positive values or fewer than 2 batch sizes.
    """
    s, e = np.asarray(steps, dtype=float), np.asarray(examples, dtype=float)
    if s.shape != e.shape or s.ndim != 1 or len(s) < 3:
        raise OFAError(
            f"trade-off fit: need 3 or more (steps, examples) pairs of equal length, got {len(s)} and {len(e)}"
        )
    if not (np.all(np.isfinite(s)) and np.all(np.isfinite(e)) and np.all(s > 0) and np.all(e > 0)):
        raise OFAError("trade-off fit: steps and examples must be finite and positive")
    batch = e / s
    if np.ptp(batch) <= 0:
        raise OFAError("trade-off fit: every point has the same batch size; S_min and E_min need several")
    # Start from the linear least-squares line S = S_min + E_min/B, weighted by 1/S (relative errors).
    design = np.stack([np.ones_like(batch), 1.0 / batch], axis=1) / s[:, None]
    start, *_ = np.linalg.lstsq(design, np.ones_like(s), rcond=None)
    start = np.log(np.maximum(start, [s.min() * 1e-3, e.min() * 1e-3]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OptimizeWarning)  # an undetermined covariance comes back as inf
        params, cov = curve_fit(_log_steps, batch, np.log(s), p0=start, maxfev=10_000)
    s_min, e_min = float(np.exp(params[0])), float(np.exp(params[1]))
    var = float(cov[0, 0] + cov[1, 1] - 2.0 * cov[0, 1]) if np.all(np.isfinite(cov)) else math.inf
    return TradeoffFit(s_min=s_min, e_min=e_min, b_crit=e_min / s_min, log_sd=math.sqrt(max(var, 0.0)), points=len(s))
