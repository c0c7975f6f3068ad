"""Gradient noise scale: the estimator against closed-form tr(Σ) and |G|², and `ofa noise-scale`."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import TINY_RECIPE as TINY

from ofa.cli import main
from ofa.train.noise_scale import MicroBatchGradNorms, NoiseScaleEstimator, grad_sq_norm, suggest_batch_size


def _measure(estimator: NoiseScaleEstimator, steps: int, dim: int, delta: torch.Tensor, sigma: float,
             b_small: int, micro: int, seed: int) -> None:
    """Linear regression y = x·w* + σε with x ~ N(0, I), loss ½(x·w − y)², at w = w* + δ.

    Per-sample gradient g = x (x·δ − σε): G = δ and Σ = (|δ|² + σ²) I + δδᵀ, so
    |G|² = |δ|² and tr(Σ) = d (|δ|² + σ²) + |δ|². Gradients go through the same helpers as training:
    micro-batch losses scaled by 1/micro and accumulated in ``.grad``.
    """
    gen = torch.Generator().manual_seed(seed)
    w_star = torch.randn(dim, generator=gen, dtype=torch.float64)
    model = torch.nn.Linear(dim, 1, bias=False).double()
    with torch.no_grad():
        model.weight.copy_((w_star + delta)[None])
    params = list(model.parameters())
    for _ in range(steps):
        model.zero_grad(set_to_none=True)
        norms = MicroBatchGradNorms(params)
        for _ in range(micro):
            x = torch.randn(b_small, dim, generator=gen, dtype=torch.float64)
            y = x @ w_star + sigma * torch.randn(b_small, generator=gen, dtype=torch.float64)
            norms.begin()
            loss = 0.5 * (model(x).squeeze(1) - y).square().mean()
            (loss / micro).backward()
            norms.end(scale=micro)
        estimator.update(norms.mean_sq, grad_sq_norm(params), b_small, b_small * micro)


@pytest.mark.parametrize(("ema", "steps"), [(1.0, 600), (0.99, 1500)])
def test_estimator_recovers_closed_form_trace_and_gradient_norm(ema, steps):
    dim, sigma = 10, 0.5
    delta = torch.full((dim,), 0.3, dtype=torch.float64)
    g2 = float(delta.square().sum())
    trace = dim * (g2 + sigma**2) + g2
    est = NoiseScaleEstimator(ema=ema)
    _measure(est, steps, dim, delta, sigma, b_small=8, micro=8, seed=1)
    s = est.summary()
    assert s["grad_sq"] == pytest.approx(g2, rel=0.10)
    assert s["trace_sigma"] == pytest.approx(trace, rel=0.10)
    assert s["b_simple"] == pytest.approx(trace / g2, rel=0.10)


def test_estimator_state_round_trips_and_suggestions():
    est = NoiseScaleEstimator(ema=0.9)
    for small, big in ((5.0, 2.0), (6.0, 2.5), (4.0, 1.5)):
        est.update(small, big, 8, 64)
    copy = NoiseScaleEstimator(ema=0.9)
    copy.load_state_dict(est.state_dict())
    assert copy.summary() == est.summary()
    est.reset()
    assert est.summary() is None and est.b_simple is None
    assert suggest_batch_size(300.0, 50_000) == 256 and suggest_batch_size(5.0, 50_000) == 8
    assert suggest_batch_size(1e6, 1000) == 128 and suggest_batch_size(None, 1000) is None
    with pytest.raises(ValueError):
        est.update(1.0, 1.0, 8, 8)


def test_cli_measures_a_phase(capsys, tmp_path):
    assert main(["noise-scale", str(TINY), "--steps", "3", "--accumulate", "4", "--phase", "depth", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["phase"] == "depth" and result["b_small"] == 8 and result["b_big"] == 32
    assert result["updates"] == 3 and result["trace_sigma"] > 0
    assert result["current_global_batch"] == 16

    assert main(["noise-scale", str(TINY), "--steps", "2", "--accumulate", "2"]) == 0
    out = capsys.readouterr().out
    assert "phase 'full'" in out and "tr(Σ)" in out

    assert main(["noise-scale", str(TINY), "--run", str(tmp_path / "missing")]) == 2
    assert "no checkpoint to measure" in capsys.readouterr().err
    assert main(["noise-scale", str(TINY), "--phase", "nope"]) == 2
    assert "no phase named 'nope'" in capsys.readouterr().err
