"""bench.digits_calibration: every calibration candidate reaches the evaluation as recipe settings, on the
supernets of the recipe's own schedule, and the best validation mean (the first of a tie) is chosen."""

import json
import sys

import pytest
import yaml

from bench import digits_calibration as bench
from bench import digits_schedule


def test_the_recipes_schedule_is_found_among_the_schedule_benchs_candidates():
    base = yaml.safe_load(digits_schedule.BASE.read_text())
    name = bench.schedule_name(base)
    assert digits_schedule.candidates()[name] == {"phases": base["phases"], "distill": base["distill"]}
    with pytest.raises(SystemExit, match=r"none of bench\.digits_schedule's"):
        bench.schedule_name({**base, "distill": {"teacher": "none"}})


def test_each_candidate_evaluates_with_its_settings_on_its_seeds_supernet(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(digits_schedule, "WORK", tmp_path)
    trained, evaluated = [], []

    def run_one(name, keys, seed, base):  # writes what digits_schedule's run leaves behind
        trained.append((name, seed))
        run = tmp_path / f"{name}_s{seed}"
        (run / "run").mkdir(parents=True)
        (run / "run" / "supernet.pt").write_bytes(b"")
        recipe = {**base, "seed": seed, "data": {**base["data"], "val_seed": seed}, **keys}
        (run / "candidate.yaml").write_text(yaml.safe_dump(recipe))

    def evaluate_supernet(path, recipe, subnets, data, splits):
        evaluated.append((path.parent.parent.name, recipe.data.calib_augment, recipe.eval.calib_batches))
        assert (data.calib is data.train) == recipe.data.calib_augment and splits == ("val",)
        assert set(subnets) == {"largest", "smallest", *(f"random_{i}" for i in range(digits_schedule.RANDOM_SUBNETS))}
        # plain calibration scores 1 point more, and more batches half a point more per 5
        top1 = 90.0 + (0.0 if recipe.data.calib_augment else 1.0) + recipe.eval.calib_batches / 10
        return {"val_top1": {name: top1 + (1.0 if name == "largest" else 0.0) for name in subnets}}

    monkeypatch.setattr(digits_schedule, "run_one", run_one)
    monkeypatch.setattr(bench, "evaluate_supernet", evaluate_supernet)
    monkeypatch.setattr(sys, "argv", ["digits_calibration", "--seeds", "0", "1", "--json"])
    assert bench.main() == 0
    name = bench.schedule_name(yaml.safe_load(digits_schedule.BASE.read_text()))
    assert trained == [(name, 0), (name, 1)]  # each missing supernet trained once, then reused
    batches = evaluated[-1][2]
    assert batches > 10 and len(evaluated) == 2 * 6
    assert {e[1:] for e in evaluated} == {(a, b) for a in (True, False) for b in (5, 10, batches)}
    assert {e[0] for e in evaluated} == {f"{name}_s0", f"{name}_s1"}
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert result["chosen"] == "plain_all" and result["train_batches"] == batches
    assert result["chosen_settings"] == {"data.calib_augment": False, "eval.calib_batches": batches}
    assert result["candidates"]["augmented_5"] == {
        "val_largest": 91.5,
        "val_smallest": 90.5,
        "val_random": 90.5,
        "val_mean": 90.83,
    }


def test_the_best_mean_is_chosen_and_a_tie_keeps_the_first():
    rows = {"a": [{"val_largest": 99.0, "val_smallest": 97.0}], "b": [{"val_largest": 98.0, "val_smallest": 98.0}]}
    judged = bench.judge(rows)
    assert judged["chosen"] == "a" and judged["candidates"]["a"]["val_mean"] == judged["candidates"]["b"]["val_mean"]
    rows["b"].append({"val_largest": 100.0, "val_smallest": 98.0})
    judged = bench.judge(rows)
    assert judged["chosen"] == "b" and judged["candidates"]["b"] == {
        "val_largest": 99.0,
        "val_smallest": 98.0,
        "val_mean": 98.5,
    }
    assert json.dumps(judged)  # the row's figures are plain JSON
