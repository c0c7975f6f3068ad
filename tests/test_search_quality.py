"""bench.search_quality's figures on a synthetic accuracy function whose best subnet under each budget is
known: split-half best, regret (negative too), rank, cause, front share; and its measurement cache."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import TINY_RECIPE, perturb, tiny_space

import bench.search_quality_measure as measure
from bench import run_all
from bench.search_quality_measure import Measurer, arch_key, image_sets
from bench.search_quality_metrics import (
    cause,
    front_indices,
    front_share,
    rank_among,
    split_half_best,
    standard_error,
    within_bar,
)
from bench.search_quality_runs import found_row
from ofa.data.datasets import data_from_meta
from ofa.families.mbv3.arch import Arch
from ofa.families.mbv3.encoding import GeneLayout
from ofa.families.mbv3.supernet import OFAMobileNetV3
from ofa.train.recipe import load_recipe

# K subnets on a grid of latencies; the true accuracy rises with latency, so under a budget the best is the
# slowest subnet that fits. Index 3 is "lucky": it looks best on the picking half (B1) but is poor on B2.
LATENCY = np.array([1.0, 2.0, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0])
TRUE = 60 + 10 * np.log(LATENCY)
LUCKY = 3
PICK = TRUE.copy()
PICK[LUCKY] = 99.0
SCORE = TRUE.copy()
SCORE[LUCKY] = 50.0


@pytest.mark.parametrize(("budget", "best"), [(1.5, 0), (3.2, 2), (4.5, 4), (7.0, 6), (100.0, 7)])
def test_split_half_best_is_the_slowest_fitting_subnet(budget, best):
    picked = split_half_best(LATENCY, TRUE, TRUE, budget)
    assert picked.index == best and picked.top1 == pytest.approx(TRUE[best])
    assert picked.fit == int(np.count_nonzero(np.less_equal(LATENCY, budget)))
    assert split_half_best(LATENCY, TRUE, TRUE, 0.5) is None


def test_split_half_best_is_chosen_on_one_half_and_scored_on_the_other():
    picked = split_half_best(LATENCY, PICK, SCORE, 3.7)  # fits 0..3; the lucky one wins on B1
    assert picked.index == LUCKY and picked.picked_on == 99.0 and picked.top1 == 50.0
    # a search that found the true best under the budget (index 2) then has a negative regret, reported as is
    regret = picked.top1 - SCORE[2]
    assert regret == pytest.approx(50.0 - TRUE[2]) and regret < 0
    assert rank_among(SCORE[2], LATENCY, SCORE, 3.7) == 1
    # above the lucky one, the best is again the slowest fitting subnet
    assert split_half_best(LATENCY, PICK, SCORE, 4.5).index == LUCKY  # still the B1 winner among 0..4
    assert split_half_best(LATENCY, np.where(PICK > 98, 0, PICK), SCORE, 4.5).index == 4


def test_rank_counts_only_fitting_subnets_that_score_strictly_higher():
    assert rank_among(TRUE[4], LATENCY, TRUE, 4.5) == 1
    assert rank_among(TRUE[1], LATENCY, TRUE, 4.5) == 4  # 2, 3 and 4 are above it; 5.. do not fit
    assert rank_among(TRUE[1], LATENCY, TRUE, 100.0) == 7


def test_standard_error_bar_and_cause():
    assert standard_error(90.0, 100) == pytest.approx(3.0)
    assert standard_error(100.0, 50) == 0.0
    assert within_bar(0.3, 0.1) and within_bar(0.9, 1.0) and not within_bar(0.31, 0.1)
    assert cause(0.2, 0.1, 80.0, 90.0) == "ok"
    assert cause(2.0, 0.5, 80.0, 81.0) == "search"  # the predictor itself rates the best higher
    assert cause(1.0, 0.5, 81.0, 80.0) == "noise"  # within 2 x sqrt(2) SE
    assert cause(2.0, 0.5, 81.0, 80.0) == "predictor"


def test_front_indices_and_share():
    lat = np.array([3.0, 1.0, 2.0, 2.5, 4.0])
    acc = np.array([90.0, 70.0, 80.0, 75.0, 85.0])  # 2.5/75 and 4/85 are dominated
    assert front_indices(lat, acc).tolist() == [1, 2, 0]
    ref_lat, ref_acc = np.array([1.0, 2.0, 3.0]), np.array([70.0, 80.0, 90.0])
    found_lat, found_acc = np.array([1.0, 2.5, 3.0]), np.array([70.0, 85.0, 91.0])
    assert front_share(ref_lat, ref_acc, found_lat, found_acc) == pytest.approx(2 / 3)  # (2, 80) is not covered
    assert front_share(ref_lat, ref_acc, found_lat, found_acc, tol=6.0) == pytest.approx(2 / 3)
    assert front_share(ref_lat, ref_acc, found_lat, found_acc, tol=10.0) == 1.0
    assert front_share(ref_lat, ref_acc, ref_lat, ref_acc) == 1.0


class LinearPredictor:
    """Predicted top-1 = the truth's latency (any monotone stand-in for the predictor)."""

    def __init__(self, latency_of):
        self.latency_of = latency_of

    def predict_batch(self, rows):
        return np.array([self.latency_of[tuple(r)] for r in np.asarray(rows)], dtype=float)


def test_found_row_regret_rank_and_cause_on_the_synthetic_truth():
    space = tiny_space()
    rng = np.random.default_rng(0)
    layout = GeneLayout.of(space)
    truth = [layout.decode(r) for r in layout.canonical(layout.sample(len(LATENCY), rng))]
    latency_of = {tuple(layout.encode(a)): float(x) for a, x in zip(truth, LATENCY)}
    ctx = SimpleNamespace(
        space=space, truth=truth, truth_latency=LATENCY, truth_b1=PICK, truth_b2=SCORE, se=lambda t: 0.5
    )
    predictor = LinearPredictor(latency_of)
    found = truth[2].with_extra({"predicted_top1": 3.0})
    row = found_row(ctx, predictor, 0, 3.7, found, float(SCORE[2]))
    assert row["best_index"] == LUCKY and row["regret"] == pytest.approx(50.0 - TRUE[2]) and row["rank"] == 1
    assert row["within"] and row["cause"] == "ok"
    # without the lucky subnet (both halves the truth) the best under a wide budget is the slowest, 8 ms
    ctx.truth_b1 = ctx.truth_b2 = TRUE
    slow = found_row(ctx, predictor, 0, 100.0, truth[1].with_extra({"predicted_top1": 2.0}), float(TRUE[1]))
    assert slow["best_index"] == 7 and slow["regret"] == pytest.approx(TRUE[7] - TRUE[1])
    assert slow["rank"] == 7 and not slow["within"]
    assert slow["cause"] == "search"  # the predictor rates the best (8 ms) above it: the search did not reach it


DATA = {
    "name": "synthetic",
    "image_size": 12,
    "val_fraction": 0.4,
    "augment": "none",
    "synthetic": {"train_size": 100, "test_size": 16, "num_classes": 4, "channels": 1},
}


def test_measurer_caches_every_subnet_and_resumes(tmp_path):
    torch.manual_seed(0)
    net = perturb(OFAMobileNetV3(tiny_space(in_channels=1, num_classes=4, resolutions=(8, 12)))).eval()
    net.save(tmp_path / "supernet.pt", meta={"data": DATA})
    net = OFAMobileNetV3.load(tmp_path / "supernet.pt")
    data = data_from_meta(net.meta)
    sets = image_sets(data, seed=0, calib_batches=1)
    a, b1, b2 = (set(sets.parts[p].dataset.indices) for p in ("a", "b1", "b2"))
    assert not (a & b1 or a & b2 or b1 & b2) and len(a | b1 | b2) == len(data.val)
    assert sets.predictor_data.val.indices == sorted(a)  # the predictor's data is collected on half A only
    layout = GeneLayout.of(net.space)
    archs = [layout.decode(r) for r in layout.sample(3, np.random.default_rng(1))]
    path = tmp_path / "measured.jsonl"
    first = Measurer(net, "w0", sets, path).measure(archs, ("b1", "b2"), "t")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 6 and {r["part"] for r in lines} == {"b1", "b2"}
    assert all(r["supernet"] == "w0" and r["count"] == sets.counts[r["part"]] for r in lines)

    def refuse(arch):
        raise AssertionError("a cached subnet was measured again")

    net.set_active = refuse
    again = Measurer(net, "w0", sets, path).measure(archs, ("b2",), "t")
    np.testing.assert_array_equal(again["b2"], first["b2"])
    with pytest.raises(AssertionError, match="measured again"):  # other weights: nothing of the file counts
        Measurer(net, "w1", sets, path).measure(archs[:1], ("b2",), "t")


def test_arch_key_ignores_unused_block_slots():
    space = tiny_space()
    d = space.max_depth
    base = Arch(12, (1, 1, 1), (3,) * (3 * d), (2,) * (3 * d))
    other = Arch(12, (1, 1, 1), tuple(3 if i % d == 0 else 7 for i in range(3 * d)), (2,) * (3 * d))
    layout = GeneLayout.of(space)
    assert arch_key(layout, base) == arch_key(layout, other)
    assert arch_key(layout, base) != arch_key(layout, Arch(16, base.depths, base.kernels, base.expands))


def test_supernet_is_found_in_the_ps_runs_and_their_records_are_never_trained_over(tmp_path, monkeypatch):
    recipe = load_recipe(TINY_RECIPE)
    trained = []

    def fake_train(recipe, folder, resume):
        trained.append(folder)
        return folder / "supernet.pt"

    monkeypatch.setattr(measure, "train", fake_train)
    runs, own = tmp_path / "ps_runs", tmp_path / "own"
    ps_dir = runs / f"ps-{measure.recipe_digest(recipe)}"
    assert measure.supernet_path(recipe, runs, own) == ps_dir / "supernet.pt"  # nothing yet: trained there
    ps_dir.mkdir(parents=True)
    (ps_dir / "metrics.jsonl").write_text("{}\n")  # a finished run's records, its weights not kept
    assert measure.supernet_path(recipe, runs, own).parent == own / f"supernet-{measure.recipe_digest(recipe)}"
    (ps_dir / "supernet.pt").write_bytes(b"")  # the PS bench's weights: reused, nothing trained
    assert measure.supernet_path(recipe, runs, own) == ps_dir / "supernet.pt"
    assert len(trained) == 2


def small_report() -> dict:
    """A report of the bench's shape: one budget, one seed, one learning-curve point."""
    row = {"seed": 0, "budget_ms": 0.2, "top1": 88.0, "regret": -0.5, "se": 0.9, "rank": 2, "table_ms": 0.19,
           "measured_ms": 0.21, "over_pct": 5.0, "cause": "ok", "test_top1": 87.5, "within": True,
           "within_latency": True, "rerank": {"top1": 88.4, "regret": -0.9, "cpu_s": 3.0}}  # fmt: skip
    point = {"size": 100, "collect_cpu_s": 120.0, "fit_cpu_s": 4.0, "rmse": 0.8, "tau": 0.41, "regret_mean": -0.5,
             "regret_max": -0.5, "within_share": 1.0, "rerank_regret_mean": -0.9, "rerank_cpu_s": 3.0}  # fmt: skip
    return {
        "supernet": "s.pt", "recipe_digest": "abc", "table": "t.yaml", "table_noise_pct": 2.0, "samples": 1000,
        "images": {"a": 2500, "b1": 1250, "b2": 1250, "test": 10000}, "seeds": [0], "main_size": 100,
        "budgets": [{"budget_ms": 0.2, "fit": 400, "best_top1": 87.5, "rows": [row]}],
        "front": {"share_mean": 0.75, "samples_front": 12, "share_within_se_mean": 0.9},
        "truth_retest_tau": 0.52, "learning_curve": [point], "all_within": True, "causes": [], "regret_max": -0.5,
        "png": "p.png",
    }  # fmt: skip


def test_results_block_renders_from_the_json():
    entry = {"name": "search_quality", "command": "python -m bench.search_quality --json", "exit": 0, "seconds": 1.0,
             "result": small_report()}  # fmt: skip
    text = run_all.render([entry])
    assert (
        "| 0.2 | 400 | 87.50 | 0 | 88.00 | -0.50 | 0.90 | 2 | 0.190 | 0.210 | +5.0% | 88.40 | -0.90 | ok | 87.50 |"
        in text
    )
    assert "| 100 | 120 | 4 | 0.800 | 0.410 | -0.50 | -0.50 | 100% | -0.90 | 3.0 |" in text
    assert "matches or dominates 75% of the K samples' measured front (12 points" in text
    assert "B1 vs B2 over the K: 0.520" in text and ": yes; worst regret -0.50" in text
    assert "search_quality" in run_all.BENCHMARKS and run_all.BENCHMARKS["search_quality"].on_request
