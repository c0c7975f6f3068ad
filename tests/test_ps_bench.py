"""`bench.ps_vs_scratch` and `bench.ps_ablation`: choices on validation, both splits reported, cached runs reused."""

from __future__ import annotations

import functools
import json
import math
import statistics
from pathlib import Path

import pytest
import torch
from helpers import TINY_RECIPE

from bench import ps_ablation, ps_cost, ps_vs_scratch, run_all
from bench import ps_rules as rules
from bench.ps_jobs import Plan, plan_text
from bench.ps_runs import ScratchRun
from ofa.train import load_recipe

ROOT = Path(__file__).resolve().parents[1]
# Smaller runs of the tiny recipe: fewer images, no augmentation, a one-epoch full phase, one calibration batch;
# the 72 training images in 2 batches of 36 (not 4 of 16), whole (no micro-batches): half the steps, same images.
SMALL = ["data.synthetic.train_size=80", "data.augment=none", "phases.full.epochs=1", "eval.calib_batches=1"]
SMALL += ["data.batch_size=36", "schedule.micro_batches=1"]


# No training-curves PNG (tests/conftest.py `no_curves`): drawing it is a fair share of runs this small.
pytestmark = pytest.mark.usefixtures("no_curves")


@pytest.fixture(scope="module", autouse=True)
def subnets_drawn_once():
    """`bench_subnets` (1000 seeded draws sorted by MACs, the same subnets for the same arguments) computed once
    per space and seed for the module, not on every `Bench` its tests build."""
    with pytest.MonkeyPatch.context() as mp:
        once = functools.cache(ps_vs_scratch.bench_subnets)
        mp.setattr(ps_vs_scratch, "bench_subnets", lambda *args, **kwargs: dict(once(*args, **kwargs)))
        yield


def _factor(lr: float) -> float:
    return round(lr / 0.1, 6)  # the tiny recipe's first phase runs at 0.1, the grid's centre


def test_bench_decides_on_validation_reports_both_splits_and_reuses_finished_runs(tmp_path, capsys):
    argv = ["--recipe", str(TINY_RECIPE), "--seeds", "0", "1", "--random", "1", "--scratch-epochs", "2"]
    argv += ["--lr-factors", "0.5", "1", "--lr-extensions", "1", "--doublings", "1", "--cache", str(tmp_path)]
    argv += ["--cost-rounds", "1", *[f for s in SMALL for f in ("--set", s)]]
    assert ps_vs_scratch.main([*argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(report["subnets"]) == {"smallest", "middle", "largest", "random_1"}
    assert report["val_images"] == 8 and report["test_images"] == 64  # 80 training images: 10% validation
    for row in report["subnets"].values():
        twin = row["twin"]
        grid = rules.lr_grid({_factor(float(lr)): v for lr, v in twin["grid"].items()}, (0.5, 1.0), 1)
        assert grid.pending == () and _factor(twin["lr"]) == grid.best and twin["lr_at_edge"] == grid.at_edge
        assert set(twin["levels"]) == {"2", "4"} and len(twin["gains"]) == 1  # one doubling, both seeds
        val = {int(e): level["val_seeds"] for e, level in twin["levels"].items()}
        assert twin["gains"][0]["gains"] == rules.doubling_gain(2, 4, val[2], val[4]).gains
        assert twin["converged_epochs"] == (None if twin["gains"][0]["gains"] else 2)
        assert twin["best_epochs"] == rules.best_level(val, [2, 4])
        assert twin["bar_test"] == twin["levels"][str(twin["best_epochs"])]["test_top1"]
        assert len(row["ps_val_seeds"]) == len(row["ps_test_seeds"]) == 2
        assert abs(row["delta_test"] - (row["ps_test"] - twin["bar_test"])) < 1e-9
        assert abs(row["delta_val"] - (row["ps_val"] - twin["bar_val"])) < 1e-9
    assert report["within_target"] == all(r["delta_test"] >= -0.5 for r in report["subnets"].values())
    largest, basis = report["subnets"]["largest"]["twin"], report["budget_basis"]
    assert basis["epochs"] == (largest["converged_epochs"] or 4)  # converged, or the longest run: a lower bound
    assert basis["cpu_seconds"] == largest["levels"][str(basis["epochs"])]["cpu_seconds"] > 0
    assert report["recorded_cpu_ratio"] == report["ps_cpu_seconds"] / basis["cpu_seconds"]
    # the budget's ratio: both sides' steps timed here, scaled to the runs' step counts
    cost, recipe = report["cost"], load_recipe(TINY_RECIPE, SMALL)
    steps = cost["steps_per_epoch"]
    assert steps == report["train_images"] // recipe.data.batch_size and cost["twin"]["epochs"] == basis["epochs"]
    assert [(n, c["epochs"]) for n, c in cost["phases"].items()] == [(p.name, p.total_epochs) for p in recipe.phases]
    assert all(c["cpu_s_per_step"] > 0 for c in cost["phases"].values()) and cost["twin"]["cpu_s_per_step"] > 0
    ps_cpu = sum(c["epochs"] * steps * c["cpu_s_per_step"] for c in cost["phases"].values())
    assert report["cpu_ratio"] == cost["ratio"] == pytest.approx(ps_cpu / cost["twin_cpu_seconds"])
    assert cost["twin_cpu_seconds"] == pytest.approx(basis["epochs"] * steps * cost["twin"]["cpu_s_per_step"])
    assert report["within_budget"] == (report["cpu_ratio"] <= 4) and len(list(tmp_path.glob("cost-*.json"))) == 1
    # 2 supernets + per twin: its grid (first seed) + the other seed at E + both seeds at 2E
    scratch = sorted(tmp_path.glob("scratch-*.json"))
    assert len(scratch) == sum(len(r["twin"]["grid"]) + 3 for r in report["subnets"].values())
    assert len(list(tmp_path.glob("ps-*/eval-*.json"))) == 2
    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.json")}
    assert ps_vs_scratch.main([*argv, "--json"]) == 0  # a rerun trains nothing and reports the same figures
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again == report and {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.json")} == stamps
    # the test split decides nothing: other test figures in every record change the bars, not the choices
    for path in scratch:
        record = json.loads(path.read_text())
        path.write_text(json.dumps({**record, "test_top1": 100.0 - record["test_top1"]}))
    assert ps_vs_scratch.main([*argv, "--json"]) == 0
    flipped = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for name, row in flipped["subnets"].items():
        before = report["subnets"][name]["twin"]
        assert [row["twin"][k] for k in ("lr", "converged_epochs", "best_epochs")] == [
            before[k] for k in ("lr", "converged_epochs", "best_epochs")
        ]
        assert row["twin"]["bar_test"] == pytest.approx(100.0 - before["bar_test"])
    table = run_all._ps_table(report)  # how bench/RESULTS.md shows it
    assert [line.split(" | ")[0] for line in table[2:6]] == ["| smallest", "| middle", "| largest", "| random_1"]
    assert f"{report['subnets']['largest']['delta_test']:+.2f}" in table[4] and "budget 4" in table[-1]


def test_plan_lists_what_the_rules_ask_for_next(tmp_path, capsys):
    argv = ["--recipe", str(TINY_RECIPE), "--random", "0", "--scratch-epochs", "2", "--cache", str(tmp_path)]
    assert ps_vs_scratch.main([*argv, "--plan"]) == 0
    out = capsys.readouterr().out
    assert out.count("scratch smallest lr") == 3 and "PS seed 0" in out and "PS seed 1" in out  # the grid at E
    assert "waits: smallest: its lr" in out and not list(tmp_path.iterdir())  # nothing run, nothing written
    with pytest.raises(SystemExit):  # one seed cannot judge a doubling
        ps_vs_scratch.main([*argv, "--seeds", "0"])
    assert "--no-convergence" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # the levels below the cap give the seed variance: the cap is >= E
        ps_vs_scratch.main([*argv, "--one-seed-after", "1"])
    assert "--one-seed-after must be >= --scratch-epochs" in capsys.readouterr().err


def test_one_seed_after_asks_only_the_first_seed_past_its_epochs(tmp_path, capsys):
    """The augmented study's long twins: with the grid and the two-seed levels cached, the plan asks for one run."""
    cfg = ps_vs_scratch.BenchConfig(
        recipe=str(TINY_RECIPE), random_subnets=0, scratch_epochs=2, doublings=2, one_seed_after=4, cache=tmp_path
    )
    bench = ps_vs_scratch.Bench(cfg)
    arch = bench.subnets["smallest"]

    def record(lr: float, epochs: int, seed: int, val: float) -> None:
        run = ScratchRun(arch, lr, epochs, seed)
        fields = {"key": run.key(bench.recipe), "val_top1": val, "test_top1": val, "cpu_seconds": 900.0}
        fields |= {"arch": run.arch.to_dict(), "seconds": 1.0, "train_images": 64}
        (tmp_path / f"scratch-{run.key(bench.recipe)}.json").write_text(json.dumps(fields))

    for factor, val in zip(rules.LR_FACTORS, (70.0, 72.0, 71.0), strict=True):  # the grid's best: the middle
        record(bench.base_lr * factor, 2, 0, val)
    record(bench.base_lr, 2, 1, 72.4)
    for seed, val in ((0, 75.0), (1, 75.4)):
        record(bench.base_lr, 4, seed, val)
    state = ps_vs_scratch.twin_state(bench, "smallest", arch)
    assert [(r.epochs, r.seed) for r in state.pending] == [(8, 0)]  # 8 > 4 epochs: the first seed only
    states = tuple(ps_vs_scratch.twin_state(bench, n, a).known for n, a in bench.twins.items())
    known = plan_text(Plan((), (), states), tmp_path)[2:]  # --plan's view of a study still running: validation so far
    grid = ", ".join(f"{bench.base_lr * f:g}: {v:.2f}" for f, v in zip(rules.LR_FACTORS, (70.0, 72.0, 71.0)))
    assert (
        known[0]
        == f"known: smallest (validation top-1): lr grid {grid}; 2 epochs 72.20 (2 seeds); 4 epochs 75.20 (2 seeds)"
    )
    assert known[1].startswith("known: middle (validation top-1): lr grid ") and "epochs" not in known[1]
    # the grid's run at the chosen lr is the ladder's first level too: 6 runs, not 7, whichever side runs
    assert ps_vs_scratch.plan(bench).known[-1] == "finished so far: 6 runs, 1.50 CPU-h"
    record(bench.base_lr, 8, 0, 75.3)
    twin = ps_vs_scratch.twin_state(bench, "smallest", arch).summary
    assert twin["converged_epochs"] == 4 and twin["levels"]["8"]["val_seeds"] == [75.3]
    pooled = statistics.mean([statistics.variance([72.0, 72.4]), statistics.variance([75.0, 75.4])])
    assert twin["gains"][-1]["se"] == pytest.approx(math.sqrt(pooled / 1 + pooled / 2))


def test_bench_skips_missing_data_in_one_line(tmp_path, capsys):
    assert (
        ps_vs_scratch.main(
            ["--recipe", "fashion", "--set", f"data.root={tmp_path}", "--cache", str(tmp_path), "--json"]
        )
        == 0
    )
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("ps_vs_scratch: skipped: ") and "dataset-fashion-mnist" in lines[0]
    assert json.loads(lines[-1])["skipped"] and not list(tmp_path.iterdir())


def test_ablation_trains_the_full_network_once_per_seed_and_every_schedule_from_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ps_ablation, "DOC", tmp_path / "page.md")
    monkeypatch.setattr(ps_ablation, "HISTORY", tmp_path / "none.json")
    doc = f"intro\n{ps_ablation.SCHEDULES_BEGIN}\nold\n{ps_ablation.SCHEDULES_END}\noutro\n"
    (tmp_path / "page.md").write_text(doc)
    cache = tmp_path / "cache"
    sets = ["data.synthetic.train_size=32", "checkpoint.every_steps=0", "data.augment=none", "eval.calib_batches=1"]
    sets += ["phases.depth.epochs=7", "phases.depth.subnets_per_step=3"]  # 8 epochs, 23 passes
    sets += ["schedule.micro_batches=1", "data.synthetic.test_size=16"]  # whole batches, a smaller test split
    argv = ["--recipe", str(TINY_RECIPE), *(f for s in sets for f in ("--set", s))]
    argv += ["--full-doublings", "0", "--cache", str(cache), "--json"]
    assert ps_ablation.main(argv) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert list(result["schedules"]) == list(ps_ablation.SCHEDULES) and result["full_ladder_done"]
    names = ("one_phase", "one_phase_half", "paper_equal", "paper_compute")
    one, half, equal, matched = (result["schedules"][n] for n in names)
    assert [len(s["seeds"]) for s in result["schedules"].values()] == [2] * len(ps_ablation.SCHEDULES)
    epochs = [sum(int(p.split()[1].split("x")[0]) for p in s["phases"]) for s in (one, half, equal)]
    assert epochs == [8, 1 + 7 // 2, 8]  # the half schedule: depth 7 // 2 epochs, expand's one kept
    assert [p.split()[0] for p in equal["phases"]][::2] == ["kernel", "depth_2", "expand_2"]
    assert matched["passes"] == one["passes"] == 23 and equal["passes"] < 23  # compute-matched: the same passes
    assert result["winner_on_val"] == max(result["schedules"], key=lambda n: result["schedules"][n]["mean_val"])
    full_runs = [p for p in cache.glob("ps-*") if "phases:\n- name: full" in (p / "recipe.yaml").read_text()]
    assert len(full_runs) == 2  # one full network per seed, shared by every schedule
    schedules = [p for p in cache.glob("ps-*") if p not in full_runs]
    for run in schedules:  # each starts from its seed's full network: frozen (init) or in-place teacher
        recipe = (run / "recipe.yaml").read_text()
        assert "supernet: " + str(cache) in recipe and ("teacher: init" in recipe or "teacher: inplace" in recipe)
    assert (tmp_path / "page.md").read_text() == doc  # a run prints its tables, only --render writes them
    assert ps_ablation.main([*argv, "--render"]) == 0
    page = (tmp_path / "page.md").read_text()
    assert page.startswith("intro\n") and page.endswith("outro\n") and "\nold\n" not in page
    row = next(line for line in page.splitlines() if line.startswith("| one_phase |"))
    assert f"{one['mean_val']:.2f}" in row and "twins pending" in row
    # A fresh clone has the records but not the weights: the full network is retrained, to the same numbers.
    cfg = ps_vs_scratch.BenchConfig(recipe=str(TINY_RECIPE), overrides=tuple(sets), cache=cache)
    ablation = ps_ablation.Ablation(cfg, 0)
    folder = cache / f"ps-{ablation.full_key(0, ablation.full_epochs)}"
    (folder / "supernet.pt").unlink()
    assert ablation.full_supernet(0) == folder / "rebuilt" / "supernet.pt"
    rebuilt = json.loads((folder / "rebuilt.json").read_text())
    assert rebuilt["rebuilt"] == rebuilt["recorded"] and rebuilt["recorded"]["val_top1"]["largest"] is not None

    # Once the twins are decided, --cost times each schedule (full network + its phases) and the one to ship is
    # the best on validation within the budget. Here: twins decided by hand, a cost of one per 6 subnet passes.
    decided = {"lr": 0.1, "converged_epochs": 4, "levels": {"4": {"seconds": 1, "cpu_seconds": 1}}, "bar_test": 0}
    monkeypatch.setattr(ps_vs_scratch, "twin_state", lambda b, n, arch: ps_vs_scratch.TwinState((), None, decided))
    timed = []

    def measure(recipe, twin, steps, rounds):
        timed.append(recipe.phases[0].name)
        return {"ratio": sum(p.total_epochs * p.subnets_per_step for p in recipe.phases) / 6}

    monkeypatch.setattr(ps_cost, "measure", measure)
    assert ps_ablation.main([*argv, "--render"]) == 0  # reads costs, measures none
    assert not timed and "not every cost measured yet" in (tmp_path / "page.md").read_text()
    capsys.readouterr()
    assert ps_ablation.main([*argv, "--cost"]) == 0
    costed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert timed == ["full"] * len(ps_ablation.SCHEDULES) and costed["costs_measured"]
    ratios = {n: s["cost_ratio"] for n, s in costed["schedules"].items()}
    within = [n for n, r in ratios.items() if r <= rules.BUDGET_RATIO]
    assert 0 < len(within) < len(ratios), ratios  # the budget decides here
    assert costed["winner_in_budget"] == max(within, key=lambda n: costed["schedules"][n]["mean_val"])
    assert ps_ablation.main([*argv, "--render"]) == 0 and len(timed) == len(ps_ablation.SCHEDULES)  # cached
    assert f"the one to ship: {costed['winner_in_budget']}." in (tmp_path / "page.md").read_text()


def test_sides_run_apart_fill_the_cache_of_the_full_report(tmp_path, capsys):
    """Processes that run one side each (or share the runs as workers) leave a cache the full report only reads."""
    common = ["--recipe", str(TINY_RECIPE), "--seeds", "0", "--random", "0", "--scratch-epochs", "2"]
    common += [
        "--lr-factors",
        "1",
        "--no-convergence",
        "--cost-rounds",
        "1",
        "--cache",
        str(tmp_path),
        *(f for s in SMALL for f in ("--set", s)),
    ]
    threads = torch.get_num_threads()
    try:
        side = ["--side", "scratch", "--subnets", "largest", "smallest", "--threads", "1", "--worker", "1/2"]
        assert ps_vs_scratch.main([*common, *side, "--json"]) == 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == {"side": "scratch", "pending": 0}
    assert len(list(tmp_path.glob("scratch-*.json"))) == 2 and not list(tmp_path.glob("ps-*"))
    assert ps_vs_scratch.main([*common, "--side", "ps", "--json"]) == 0
    capsys.readouterr()
    assert len(list(tmp_path.glob("ps-*/eval-*.json"))) == 1 and not list((tmp_path / "claims").iterdir())
    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.json")}
    assert ps_vs_scratch.main([*common, "--subnets", "largest", "smallest", "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.json") if p in stamps} == stamps  # nothing trained again
    (timed,) = [p for p in tmp_path.rglob("*.json") if p not in stamps]  # the cost ratio, timed on this machine
    assert timed.name.startswith("cost-") and json.loads(timed.read_text())["ratio"] == report["cpu_ratio"]
    assert list(report["subnets"]) == ["largest", "smallest"] and report["scratch_converged"] is False
    assert ps_vs_scratch.main([*common, "--subnets", "smallest", "--json"]) == 2  # the budget needs the largest
    assert "--subnets" in capsys.readouterr().err


def test_run_all_keeps_a_row_whose_command_changed_marked_stale():
    name = "search_speed"
    old = {"name": name, "command": "python bench/search_speed.py --old", "meaning": "", "exit": 0,
           "seconds": 1.0, "date": "2026-11-01", "machine": "m", "result": {"seconds": 0.9}}  # fmt: skip
    fresh = {**old, "command": run_all.command_text(run_all.BENCHMARKS[name].command), "date": "2026-12-01"}
    kept = run_all.current([old, {**old, "name": "gone_benchmark"}])
    assert list(kept) == [name] and kept[name]["stale"] is True  # kept, not dropped; unknown names go
    text = run_all.render([kept[name]])
    assert "**stale**: measured 2026-11-01 with `python bench/search_speed.py --old`" in text
    assert "stale (2026-11-01, older command): seconds 0.9" in run_all.readme_table([kept[name]])
    assert run_all.current([fresh])[name]["stale"] is False
    assert "stale" not in run_all.render([run_all.current([fresh])[name]])


def test_a_failed_rerun_keeps_the_last_good_figures_marked_stale():
    name = "search_speed"
    command = run_all.command_text(run_all.BENCHMARKS[name].command)
    good = {"name": name, "command": command, "meaning": "", "exit": 0, "seconds": 1.0, "date": "2026-11-01",
            "machine": "m", "result": {"seconds": 0.9}}  # fmt: skip
    failed = {**good, "exit": 1, "date": "2026-12-02", "result": {}}
    (kept,) = run_all.merge({name: good}, [failed]).values()
    assert (
        kept["result"] == {"seconds": 0.9}
        and kept["stale"]
        and kept["failed_rerun"] == {"date": "2026-12-02", "exit": 1}
    )
    assert "its rerun on 2026-12-02 failed (exit 1)" in run_all.render([kept])
    assert "stale (2026-11-01; rerun 2026-12-02 failed): seconds 0.9" in run_all.readme_table([kept])
    assert run_all.current([kept])[name]["stale"]  # read back from results.json, still stale
    assert run_all.merge({}, [failed])[name] == failed  # nothing to keep: the failure is the row
    assert run_all.merge({name: good}, [{**good, "date": "2026-12-03"}])[name]["date"] == "2026-12-03"


def test_every_stored_entry_stays_and_one_measured_with_an_older_command_is_marked_stale_in_results_md():
    """A registry command that changes (as when the scripts became `python -m bench.NAME`) drops no stored
    row: bench/RESULTS.md marks each row measured with another command stale, with its date and old command."""
    stored = json.loads((ROOT / "bench" / "data" / "results.json").read_text())
    kept = run_all.current(stored)
    assert list(kept) == [r["name"] for r in stored]  # none dropped
    results = (ROOT / "bench" / "RESULTS.md").read_text()
    for name, run in kept.items():
        assert run["stale"] == (run["command"] != run_all.command_text(run_all.BENCHMARKS[name].command))
        if run["command"].startswith("python bench/"):  # a script path: a command from before the package
            assert run["stale"] and run_all.stale_note(run) in results, name
