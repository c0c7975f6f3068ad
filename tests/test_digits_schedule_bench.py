"""The demo-schedule benchmark's verdict: the best on validation within the budget, passing the bar where one does."""

from __future__ import annotations

import pytest

from bench.digits_schedule import (
    BUDGET_PASSES,
    REFERENCE,
    SIX_PHASES,
    binomial_se,
    candidates,
    image_passes,
    summarize,
)


def _row(name: str, seed: int, passes: int, largest: float, smallest: float, random: float = 90.0) -> dict:
    return {
        "name": name,
        "seed": seed,
        "image_passes": passes,
        "val_largest": largest,
        "val_smallest": smallest,
        "val_random": random,
        "train_seconds": 1.0,
    }


def test_the_best_passing_candidate_on_validation_within_the_budget_is_chosen():
    rows = [_row(REFERENCE, s, 58, 98.0, 96.0) for s in (0, 1)]
    rows += [_row("cheap_bad", s, 8, 95.0, 90.0) for s in (0, 1)]
    rows += [_row("cheap_ok", 0, 12, 97.0, 95.0), _row("cheap_ok", 1, 12, 97.0, 95.8)]  # mean 95.4 smallest
    rows += [_row("budget_better", s, BUDGET_PASSES, 97.5, 96.0) for s in (0, 1)]
    rows += [_row("over_budget", s, BUDGET_PASSES + 1, 99.0, 99.0) for s in (0, 1)]
    rows += [_row("unfinished", 0, 5, 99.0, 99.0)]  # one seed only: not judged
    names = [REFERENCE, "cheap_bad", "cheap_ok", "budget_better", "over_budget", "unfinished"]
    summary = summarize(rows, names, [0, 1], 144)
    se = binomial_se(96.0, 144)
    assert se == pytest.approx(1.633, abs=1e-3)
    assert summary["bar"]["smallest"] == pytest.approx(96.0 - se, abs=0.01)
    assert "unfinished" not in summary["candidates"] and not summary["candidates"]["cheap_bad"]["passes"]
    assert summary["candidates"]["cheap_ok"]["passes"] and summary["candidates"]["over_budget"]["passes"]
    assert summary["chosen"] == "budget_better" and summary["chosen_passes"]
    # above the demo's targets passes even where the reference is better still
    high = [_row(REFERENCE, s, 58, 100.0, 100.0) for s in (0, 1)] + [_row("x", s, 9, 98.5, 97.5) for s in (0, 1)]
    assert summarize(high, [REFERENCE, "x"], [0, 1], 144)["chosen"] == "x"
    # ... but not where the subnets between the corners, which the search exports, were left behind
    corners_only = high[:2] + [_row("corners_only", s, 9, 98.5, 97.5, random=80.0) for s in (0, 1)]
    left_behind = summarize(corners_only, [REFERENCE, "corners_only"], [0, 1], 144)
    assert left_behind["bar"]["random"] == pytest.approx(90.0 - binomial_se(90.0, 144), abs=0.01)
    assert left_behind["chosen"] == "corners_only" and not left_behind["chosen_passes"]
    # nothing passes within the budget: the best on validation within it is chosen, flagged as below the bar
    bad = [_row(REFERENCE, s, 58, 99.0, 99.0) for s in (0, 1)] + rows[2:6]
    bad += [_row("late", s, BUDGET_PASSES + 1, 99.0, 99.0) for s in (0, 1)]
    fallback = summarize(bad, [REFERENCE, "cheap_bad", "cheap_ok", "late"], [0, 1], 144)
    assert not any(fallback["candidates"][n]["passes"] for n in ("cheap_bad", "cheap_ok"))
    assert fallback["chosen"] == "cheap_ok" and not fallback["chosen_passes"]  # "late" passes, over the budget
    assert summarize(rows[:2], [REFERENCE], [0, 1], 144)["chosen"] is None  # nothing within the budget at all


def test_the_recipe_holds_the_chosen_schedule_and_the_reference_is_the_former_one():
    import yaml

    from bench.digits_schedule import BASE, RECORD, SEEDS

    assert image_passes(SIX_PHASES) == 58 and candidates()[REFERENCE]["phases"] == SIX_PHASES
    record = [yaml.safe_load(line) for line in RECORD.read_text().splitlines() if line.strip()]
    summary = summarize(record, list(candidates()), SEEDS, 144)
    recipe = yaml.safe_load(BASE.read_text())
    chosen = candidates()[summary["chosen"]]
    assert recipe["phases"] == chosen["phases"] and recipe["distill"] == chosen["distill"]
