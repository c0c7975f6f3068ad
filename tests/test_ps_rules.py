"""`bench.ps_rules`: the benchmarks' decision rules on synthetic validation figures with known answers."""

from __future__ import annotations

import math

import pytest

from bench import ps_rules as rules


def test_lr_grid_asks_for_the_grid_then_extends_by_factors_of_two_while_the_best_is_at_an_edge():
    assert rules.lr_grid({}).pending == (0.5, 1.0, 2.0)
    interior = rules.lr_grid({0.5: 80.0, 1.0: 82.0, 2.0: 81.0})
    assert interior.pending == () and interior.best == 1.0 and not interior.at_edge
    assert interior.val == {0.5: 80.0, 1.0: 82.0, 2.0: 81.0}
    assert rules.lr_grid({0.5: 80.0, 1.0: 81.0, 2.0: 82.0}).pending == (4.0,)  # best at the top: one more up
    assert rules.lr_grid({0.5: 83.0, 1.0: 81.0, 2.0: 80.0}).pending == (0.25,)  # best at the bottom: one down
    # the extension turned the edge into an interior best: decided, not flagged
    found = rules.lr_grid({0.5: 80.0, 1.0: 81.0, 2.0: 83.0, 4.0: 82.0})
    assert (found.best, found.at_edge, found.factors) == (2.0, False, (0.5, 1.0, 2.0, 4.0))


def test_lr_grid_stops_at_its_bound_and_flags_a_best_still_at_the_edge():
    rising = {f: 80.0 + math.log2(f) for f in (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)}
    state = rules.lr_grid(rising)  # LR_EXTENSIONS = 2: up to 2 x 2**2 = 8
    assert state.pending == () and state.best == 8.0 and state.at_edge and state.factors == (0.5, 1, 2, 4, 8)
    assert rules.lr_grid(rising, extensions=0).best == 2.0 and rules.lr_grid(rising, extensions=0).at_edge
    single = rules.lr_grid({1.0: 70.0}, factors=(1.0,))
    assert single.best == 1.0 and not single.at_edge  # a one-point grid has no edge to extend from
    assert rules.lr_grid({0.5: 80.0, 1.0: 80.0, 2.0: 80.0}).best == 1.0  # ties: the recipe's rate


def test_a_doubling_gains_only_above_the_floor_and_above_two_standard_errors():
    small = rules.doubling_gain(20, 40, [85.0, 85.2], [85.25, 85.45])  # +0.25, seeds agree: below the 0.3 floor
    assert small.mean == pytest.approx(0.25) and small.threshold == 0.3 and not small.gains
    clear = rules.doubling_gain(20, 40, [85.0, 85.2], [85.6, 85.8])  # +0.6, SE 0.14: gains
    assert clear.se == pytest.approx(math.sqrt(0.02 / 2 + 0.02 / 2)) and clear.gains
    noisy = rules.doubling_gain(20, 40, [84.0, 86.0], [84.6, 86.6])  # +0.6 but SE sqrt(2): the bar 2 sqrt(2)
    assert noisy.threshold == pytest.approx(2 * math.sqrt(2)) and not noisy.gains
    with pytest.raises(ValueError, match=">= 2 seeds"):
        rules.doubling_gain(20, 40, [85.0], [86.0])


def test_the_ladder_doubles_while_it_gains_then_runs_one_sensitivity_doubling():
    assert rules.ladder(20, {}).pending == (20, 40)  # both ends of the first doubling, every seed
    assert rules.ladder(20, {20: [80.0, 80.2], 40: [81.0]}).pending == (40,)  # a seed missing
    climbing = {20: [80.0, 80.2], 40: [81.0, 81.2]}
    state = rules.ladder(20, climbing)
    assert state.pending == (80,) and state.converged_epochs is None and state.gains[0].gains
    stopped = rules.ladder(20, {**climbing, 80: [81.1, 81.3]})  # +0.1 from 40 to 80: converged at 40
    assert stopped.converged_epochs == 40 and stopped.pending == (160,) and stopped.sensitivity is None
    done = rules.ladder(20, {**climbing, 80: [81.1, 81.3], 160: [81.0, 81.4]})
    assert done.done and done.converged_epochs == 40 and done.levels == (20, 40, 80, 160)
    assert done.sensitivity is not None and (done.sensitivity.start, done.sensitivity.end) == (80, 160)
    assert [g.gains for g in done.gains] == [True, False, False]


def test_the_ladder_stops_at_its_bound_unconverged_and_with_no_sensitivity_after_a_last_stop():
    rising = {20 * 2**k: [80.0 + k, 80.2 + k] for k in range(4)}
    state = rules.ladder(20, rising)  # every doubling gains a point; MAX_DOUBLINGS = 3
    assert state.done and state.converged_epochs is None and state.levels == (20, 40, 80, 160)
    late = {**rising, 160: [82.0, 82.2]}  # the third doubling is flat: converged at 80, no room left
    state = rules.ladder(20, late)
    assert state.done and state.converged_epochs == 80 and state.sensitivity is None
    at_once = rules.ladder(20, {20: [80.0, 80.2], 40: [80.1, 80.3], 80: [80.0, 80.2]}, doublings=2)
    assert at_once.converged_epochs == 20 and at_once.sensitivity.start == 40 and at_once.done
    assert rules.ladder(20, {20: [80.0, 80.1]}, doublings=0).done  # no ladder: E with every seed


def test_past_one_seed_after_a_level_needs_one_seed_and_its_gain_the_pooled_seed_variance():
    """The augmented study's ladder (20 -> 320 epochs, one seed past 80): each long run counts once."""
    assert [rules.seeds_at(e, 2, 80) for e in (20, 40, 80, 160, 320)] == [2, 2, 2, 1, 1]
    assert rules.seeds_at(640, 2) == 2  # no cap: every seed
    two = {20: [80.0, 80.4], 40: [81.0, 81.2], 80: [82.0, 82.6]}  # seed variances 0.08, 0.02, 0.18
    assert rules.pooled_seed_variance(two, 2) == pytest.approx((0.08 + 0.02 + 0.18) / 3)
    state = rules.ladder(20, two, doublings=4, one_seed_after=80)
    assert state.pending == (160,) and not state.converged_epochs  # one seed is all 160 asks for
    climbing = rules.ladder(20, {**two, 160: [84.0]}, doublings=4, one_seed_after=80)
    gain = climbing.gains[-1]  # 80 -> 160: mean of two seeds against one run
    assert gain.mean == pytest.approx(84.0 - 82.3) and gain.gains and climbing.pending == (320,)
    pooled = rules.pooled_seed_variance(two, 2)
    assert gain.se == pytest.approx(math.sqrt(pooled / 1 + pooled / 2))
    flat = rules.ladder(20, {**two, 160: [84.0], 320: [84.1]}, doublings=4, one_seed_after=80)
    assert flat.converged_epochs == 160 and flat.done and flat.levels == (20, 40, 80, 160, 320)
    assert flat.gains[-1].se == pytest.approx(math.sqrt(2 * pooled))  # one run a side
    with pytest.raises(ValueError, match=">= 2 seeds"):
        rules.ladder(20, {20: [80.0], 40: [81.0]}, one_seed_after=10)  # no level gives the seed variance


def test_the_best_twin_is_the_epoch_count_with_the_best_validation_mean():
    val = {20: [80.0, 80.2], 40: [81.0, 81.2], 80: [81.2, 81.0]}
    assert rules.best_level(val, [20, 40, 80]) == 40  # a tie goes to the shorter run
    assert rules.best_level({**val, 80: [81.5, 81.0]}, [20, 40, 80]) == 80


def test_the_paper_order_keeps_its_proportions_and_the_compute_matched_total_its_passes():
    split = rules.paper_split(41)
    assert sum(split) == 41 and split[0] == split[2] == split[4] and min(split[1], split[3]) >= 2
    assert rules.paper_passes(split) == split[0] + 2 * (split[1] + split[2]) + 4 * (split[3] + split[4])
    assert rules.paper_split(425) == (125, 25, 125, 25, 125)  # the official epochs, warmups included
    assert rules.paper_split(8) == (2, 1, 2, 1, 2)  # the least: warmed-up phases get one more epoch
    with pytest.raises(ValueError, match=">= 8 epochs"):
        rules.paper_split(7)
    total = rules.compute_matched_total(41 * 4)  # one phase of 41 epochs at 4 subnets a step
    assert abs(rules.paper_passes(rules.paper_split(total)) - 164) <= 2 and total > 41
    assert [p[4] for p in rules.PAPER_ORDER] == [1, 2, 2, 4, 4]


def test_ladder_text_names_each_doubling_and_its_verdict():
    twin = {
        "gains": [
            {"start": 20, "end": 40, "mean": 1.0, "threshold": 0.3, "gains": True},
            {"start": 40, "end": 80, "mean": 0.1, "threshold": 0.3, "gains": False},
            {"start": 80, "end": 160, "mean": -0.2, "threshold": 0.4, "gains": False},
        ],
        "sensitivity": {"start": 80},
    }
    assert rules.ladder_text(twin) == (
        "20->40 +1.00 (bar 0.30) gains; 40->80 +0.10 (bar 0.30) stop; 80->160 -0.20 (bar 0.40) sensitivity"
    )
