"""Gradient noise scale: the estimator against closed-form tr(Σ) and |G|², the batch-size advice it gives
in `ofa noise-scale` and in the training log."""

from __future__ import annotations

import itertools
import json
import math
import re
import statistics

import pytest
import torch
from helpers import TINY_RECIPE as TINY

from ofa.cli import main
from ofa.train import noise_measure, ps_step
from ofa.train.noise_scale import (
    MicroBatchGradNorms,
    NoiseScaleEstimator,
    b_simple_log_sd,
    batch_advice,
    grad_sq_norm,
    steps_factor,
    suggest_batch_size,
)


def _measure(
    estimator: NoiseScaleEstimator,
    steps: int,
    dim: int,
    delta: torch.Tensor,
    sigma: float,
    b_small: int,
    micro: int,
    seed: int,
) -> list[tuple[float, float]]:
    """Linear regression y = x·w* + σε with x ~ N(0, I), loss ½(x·w − y)², at w = w* + δ.

    Per-sample gradient g = x (x·δ − σε): G = δ and Σ = (|δ|² + σ²) I + δδᵀ, so
    |G|² = |δ|² and tr(Σ) = d (|δ|² + σ²) + |δ|². Gradients go through the same helpers as training:
    micro-batch losses scaled by 1/micro and accumulated in ``.grad``. Returns each step's (|G|², tr(Σ)).
    """
    gen = torch.Generator().manual_seed(seed)
    w_star = torch.randn(dim, generator=gen, dtype=torch.float64)
    model = torch.nn.Linear(dim, 1, bias=False).double()
    with torch.no_grad():
        model.weight.copy_((w_star + delta)[None])
    params = list(model.parameters())
    estimates = []
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
        estimates.append(estimator.update(norms.mean_sq, grad_sq_norm(params), b_small, b_small * micro))
    return estimates


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


def test_b_simple_standard_error_matches_the_spread_of_repeated_measurements():
    """The delta-method error of one 30-step measurement predicts how ln B_simple scatters over 40 repeats."""
    dim, sigma, steps = 10, 0.5, 30
    delta = torch.full((dim,), 0.3, dtype=torch.float64)
    logs, predicted = [], []
    for seed in range(40):
        est = NoiseScaleEstimator(ema=1.0)
        per_step = _measure(est, steps, dim, delta, sigma, b_small=8, micro=4, seed=seed)
        logs.append(math.log(est.b_simple))
        predicted.append(b_simple_log_sd([g for g, _ in per_step], [t for _, t in per_step]))
    spread = statistics.stdev(logs)
    assert 0.05 < spread < 1.0  # the test measures a real scatter, not round-off
    assert statistics.median(predicted) == pytest.approx(spread, rel=0.35)
    assert b_simple_log_sd([1.0], [2.0]) == math.inf and b_simple_log_sd([-1.0, -2.0], [3.0, 4.0]) == math.inf


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


def known_noise(traces: list[float], grad_sq: float = 1.0) -> type[NoiseScaleEstimator]:
    """An estimator fed the squared gradient norms of a known |G|² and tr(Σ) (one trace per update, in turn),
    whatever the network's gradients were: by the paper's E|G_b|² = |G|² + tr(Σ)/b at both batch sizes."""
    values = itertools.cycle(traces)

    class Known(NoiseScaleEstimator):
        def update(self, small_sq, big_sq, b_small, b_big):
            trace = next(values)
            return super().update(grad_sq + trace / b_small, grad_sq + trace / b_big, b_small, b_big)

    return Known


# B_simple = 64 at global batch 16 and 160 training images, worked out by hand: 16 / 64 = 0.25; the suggestion is
# the power of two nearest 64 capped at a quarter of the images (32); steps (1 + 64/16) / (1 + 64/32) = 5/3 fewer
# for 2 / (5/3) = 1.2x the examples.
ADVICE_AT_64 = (
    "batch 16 is ~0.25× the noise scale (B_simple ≈ 64): larger batches (more processes) cut steps almost linearly "
    "up to ~4×; suggested global batch 32: ~1.7× fewer steps for ~1.2× the examples"
)


def test_cli_measures_a_phase(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(noise_measure, "NoiseScaleEstimator", known_noise([32.0, 64.0, 96.0]))
    assert main(["noise-scale", str(TINY), "--steps", "3", "--accumulate", "4", "--phase", "depth", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["phase"] == "depth" and result["b_small"] == 8 and result["b_big"] == 32
    assert result["updates"] == 3 and result["trace_sigma"] > 0
    assert result["b_simple"] == pytest.approx(64.0) and result["grad_sq"] == pytest.approx(1.0)
    # |G|² is the same every step, so ln B_simple's error is that of the mean trace: sd / mean / sqrt(n)
    assert result["b_simple_log_sd"] == pytest.approx(32.0 / 64.0 / math.sqrt(3))
    assert result["current_global_batch"] == 16

    assert result["advice"] == ADVICE_AT_64
    monkeypatch.undo()

    assert main(["noise-scale", str(TINY), "--steps", "2", "--accumulate", "2"]) == 0
    out = capsys.readouterr().out
    assert "phase 'full'" in out and "tr(Σ)" in out
    assert re.search(r"^  batch 16 is ~[0-9.]+× the noise scale \(B_simple ≈ \d+\)", out, re.M), out

    assert main(["noise-scale", str(TINY), "--run", str(tmp_path / "missing")]) == 2
    assert "no checkpoint to measure" in capsys.readouterr().err
    assert main(["noise-scale", str(TINY), "--phase", "nope"]) == 2
    assert "no phase named 'nope'" in capsys.readouterr().err


def test_advice_says_where_the_batch_sits_and_agrees_with_the_one_suggestion():
    below = batch_advice(64, 320.0, 50_000)
    assert below.startswith("batch 64 is ~0.2× the noise scale (B_simple ≈ 320)")
    assert "larger batches (more processes) cut steps almost linearly up to ~5×" in below
    assert f"suggested global batch {suggest_batch_size(320.0, 50_000)}" in below  # 256
    assert f"~{steps_factor(64, 256, 320.0):.2g}× fewer steps" in below  # (1 + 5) / (1 + 1.25) = 2.7
    above = batch_advice(1024, 100.0, 50_000)
    assert "~10× the noise scale" in above and "larger batches mostly add compute" in above
    assert "suggested global batch 128" in above and "fewer examples" in above
    assert "about the critical batch; keep it" in batch_advice(128, 120.0, 50_000)
    assert "not measurable" in batch_advice(64, None, 50_000)
    assert steps_factor(64, 64, 320.0) == 1.0 and steps_factor(64, 128, 1e9) == pytest.approx(2.0)


def test_training_log_ends_each_phase_with_the_advice(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(ps_step, "NoiseScaleEstimator", known_noise([64.0]))
    assert main(["train", str(TINY), "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["phase"] for r in rows if r["kind"] == "phase"] == ["full", "depth", "expand"]
    for row in (r for r in rows if r["kind"] == "phase"):
        assert row["noise_scale"]["b_simple"] == pytest.approx(64.0)
        line = f"{row['phase']}: {ADVICE_AT_64}"
        assert re.search(f"^{re.escape(line)}$", out, re.M), (line, out)
        assert re.match(rf"{row['phase']}: batch 16 is ~[0-9.]+× the noise scale", line), line
