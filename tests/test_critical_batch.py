"""The steps–examples trade-off fit (McCandlish et al. 2018) on synthetic points of known S_min, E_min."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from helpers import TINY_RECIPE

from bench import critical_batch
from ofa.train.critical_batch import fit_tradeoff
from ofa.utils.errors import OFAError

ROOT = Path(__file__).resolve().parents[1]
BATCHES = np.array([16, 32, 64, 128, 256, 512, 1024], dtype=float)


def _points(s_min: float, e_min: float, noise: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Steps S = S_min + E_min/B to a target, scattered by a relative (log-normal) noise; E = B·S."""
    steps = (s_min + e_min / BATCHES) * np.exp(noise * np.random.default_rng(seed).standard_normal(len(BATCHES)))
    return steps, steps * BATCHES


def test_fit_recovers_exact_points():
    steps, examples = _points(40.0, 8000.0, 0.0, seed=0)
    fit = fit_tradeoff(steps, examples)
    assert fit.s_min == pytest.approx(40.0, rel=1e-6) and fit.e_min == pytest.approx(8000.0, rel=1e-6)
    assert fit.b_crit == pytest.approx(200.0, rel=1e-6) and fit.log_sd < 1e-6
    assert fit.steps(200.0) == pytest.approx(80.0, rel=1e-6)  # 2·S_min at B_crit


@pytest.mark.parametrize("seed", range(5))
def test_fit_recovers_noisy_points_within_tolerance_and_interval(seed):
    s_min, e_min = 25.0, 3000.0  # B_crit 120
    steps, examples = _points(s_min, e_min, 0.08, seed)
    fit = fit_tradeoff(steps, examples)
    assert fit.s_min == pytest.approx(s_min, rel=0.25) and fit.e_min == pytest.approx(e_min, rel=0.25)
    assert fit.b_crit == pytest.approx(e_min / s_min, rel=0.35)
    low, high = fit.interval(z=3.0)
    assert low < e_min / s_min < high and 0 < fit.log_sd < 0.5
    assert fit.to_dict()["b_crit_low"] < fit.b_crit < fit.to_dict()["b_crit_high"]


def test_fit_rejects_too_few_or_degenerate_points():
    with pytest.raises(OFAError, match="3 or more"):
        fit_tradeoff([10.0, 5.0], [160.0, 160.0])
    with pytest.raises(OFAError, match="same batch size"):
        fit_tradeoff([10.0, 20.0, 30.0], [640.0, 1280.0, 1920.0])
    with pytest.raises(OFAError, match="positive"):
        fit_tradeoff([10.0, 0.0, 30.0], [160.0, 320.0, 1920.0])


def test_bench_skips_missing_data_and_refuses_a_data_set_without_a_fixed_target(tmp_path, capsys):
    fashion = yaml.safe_load((ROOT / "recipes" / "fashion_mnist.yaml").read_text())
    fashion["data"]["root"] = str(tmp_path)  # no Fashion-MNIST files there
    recipe = tmp_path / "fashion.yaml"
    recipe.write_text(yaml.safe_dump(fashion))
    assert critical_batch.main([str(recipe), "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("critical_batch: skipped: ") and "dataset-fashion-mnist" in lines[0]
    assert json.loads(lines[-1])["skipped"] and not list(tmp_path.glob("*.png"))

    assert critical_batch.main([str(TINY_RECIPE), "--out", str(tmp_path / "c.png")]) == 2  # synthetic data: no target
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "'synthetic'" in err and "--target" in err


def test_bench_flags_batches_whose_best_rate_is_at_the_grid_edge_and_refuses_bad_factors(tmp_path, capsys):
    runs = [
        critical_batch.Run(b, lr, steps, None if steps is None else b * steps, "")
        for b, lr, steps in [
            (16, 0.1, 90),
            (16, 0.2, 80),
            (16, 0.4, 85),  # best inside: bracketed
            (64, 0.2, 30),
            (64, 0.4, 35),
            (64, 0.8, 40),  # best at the lowest rate
            (256, 0.4, None),
            (256, 0.8, 20),
            (256, 1.6, 12),
        ]
    ]  # best at the highest
    chosen = [runs[1], runs[3], runs[8]]
    assert critical_batch.grid_edge_batches(runs, chosen) == [64, 256]
    assert critical_batch.grid_edge_batches(runs[:1], runs[:1]) == []  # a single rate has no edge to speak of

    args = [str(TINY_RECIPE), "--target", "1.0", "--lr-factors", "0.5", "0", "--out", str(tmp_path / "c.png")]
    assert critical_batch.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--lr-factors" in err and not list(tmp_path.glob("*.png"))


def test_sweep_tries_the_last_best_factor_first_and_stops_runs_that_can_no_longer_win(monkeypatch):
    full = {  # (batch, factor) -> steps the run would take to the target (None: never)
        (16, 0.5): 90, (16, 1.0): 100, (16, 2.0): 80,
        (64, 0.5): 40, (64, 1.0): 30, (64, 2.0): None,
        (256, 0.5): 14, (256, 1.0): 12, (256, 2.0): 12,
    }  # fmt: skip
    calls = []

    def fake_train(sweep, p, state, batch, lr, max_steps=None):
        factor = round(lr / math.sqrt(batch / 64), 5)
        calls.append((batch, factor, max_steps))
        steps = full[batch, factor]
        if steps is None or (max_steps is not None and steps >= max_steps):
            return critical_batch.Run(batch, lr, None, None, "stopped or not reached"), None
        return critical_batch.Run(batch, lr, steps, steps * batch, "reached"), {"w": batch}

    monkeypatch.setattr(critical_batch, "train_to_target", fake_train)
    sweep = critical_batch.Sweep("r.yaml", None, None, (16, 64, 256), 16, 1.0, 1, 1, 1, Path("c.png"), (0.5, 1.0, 2.0))
    runs, best, ref_weights = critical_batch.sweep_runs(sweep, 0, None, 64, 1.0)
    # factor 1 first, then by distance from the last batch size's best; later runs capped at the best so far
    assert calls == [
        (16, 1.0, None), (16, 0.5, 100), (16, 2.0, 90),
        (64, 2.0, None), (64, 1.0, None), (64, 0.5, 30),
        (256, 1.0, None), (256, 0.5, 12), (256, 2.0, 12),
    ]  # fmt: skip
    assert len(runs) == len(calls) and all(best[b] in runs for b in best)
    assert {b: r.steps for b, r in best.items()} == {
        b: min(s for (bb, _), s in full.items() if bb == b and s) for b in (16, 64, 256)
    }  # the same best steps as running every rate to the end
    assert best[256].lr == 2.0  # factor 1 (lr 1 x sqrt(256 / 64)): of the tied rates, the first tried
    assert list(ref_weights) == [1.0]  # the reference batch size's reached runs keep their weights


def test_a_stopped_sweep_continues_from_the_runs_its_cache_kept(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    sweep = critical_batch.Sweep(
        str(TINY_RECIPE), None, None, (16,), 16, 1.0, 3, 1, 1, tmp_path / "c.png", (1.0,), cache
    )
    run, weights = critical_batch.cached_run(sweep, 0, None, 16, 0.1)
    assert run.steps and not run.cached and len(list(cache.glob("run-*.json"))) == 1

    def must_not_train(*args):
        raise AssertionError("a kept run was trained again")

    monkeypatch.setattr(critical_batch, "train_to_target", must_not_train)
    again, kept = critical_batch.cached_run(sweep, 0, None, 16, 0.1)
    assert again == dataclasses.replace(run, cached=True)
    assert kept.keys() == weights.keys() and all(torch.equal(kept[k], weights[k]) for k in weights)

    trained = []  # anything that decides a run is in its key: each of these trains anew
    stopped = critical_batch.Run(16, 0.05, None, None, "stopped")
    monkeypatch.setattr(critical_batch, "train_to_target", lambda *a: trained.append(a) or (stopped, None))
    critical_batch.cached_run(sweep, 0, None, 16, 0.1, max_steps=5)
    critical_batch.cached_run(sweep, 0, None, 16, 0.05)
    critical_batch.cached_run(dataclasses.replace(sweep, target=0.9), 0, None, 16, 0.1)
    assert len(trained) == 3
    unreached, none = critical_batch.cached_run(sweep, 0, None, 16, 0.05)  # kept without weights, read back so
    assert unreached == dataclasses.replace(stopped, cached=True) and none is None and len(trained) == 3
    assert len(list(cache.glob("run-*.pt"))) == 1
