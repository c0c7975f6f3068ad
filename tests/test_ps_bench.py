"""`bench.ps_vs_scratch`: both sides with their cost, cached runs reused on a rerun, missing data skipped."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from conftest import TINY_RECIPE

from bench import ps_ablation, ps_vs_scratch, run_all

ROOT = Path(__file__).resolve().parents[1]


def test_bench_reports_both_sides_and_reuses_finished_runs(tmp_path, capsys):
    argv = [
        "--recipe",
        str(TINY_RECIPE),
        "--seeds",
        "0",
        "1",
        "--random",
        "1",
        "--scratch-epochs",
        "2",
        "--lr-factors",
        "0.5",
        "1",
        "--cache",
        str(tmp_path),
        "--json",
    ]
    assert ps_vs_scratch.main(argv) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(report["subnets"]) == {"smallest", "middle", "largest", "random_1"}
    for row in report["subnets"].values():
        scratch = row["scratch"]
        assert len(row["ps_seeds"]) == 2 and len(scratch["seeds"]) == 2 and set(scratch["grid"]) == {"0.05", "0.1"}
        assert abs(row["delta"] - (row["ps_top1"] - scratch["test_top1"])) < 1e-9
        assert scratch["seconds"] > 0 and scratch["train_images"] == 2 * (report["train_images"] // 16) * 16
        longer = scratch["longer"]  # the convergence ladder: 4 epochs, then 8 only if 4 gained > 0.3 points
        assert list(longer)[:1] == ["4"] and scratch["test_top1_2x"] == longer["4"] and len(longer) <= 2
        assert ("8" in longer) == (longer["4"] - scratch["seeds"][0] > 0.3)
        assert scratch["bar"] == max(scratch["test_top1"], *longer.values())
        assert abs(row["delta_bar"] - (row["ps_top1"] - scratch["bar"])) < 1e-9
    assert report["within_target"] == all(r["delta_bar"] >= -0.5 for r in report["subnets"].values())
    macs = {n: r["macs"] for n, r in report["subnets"].items()}
    assert macs["smallest"] <= macs["middle"] <= macs["largest"]
    assert report["ps_seconds"] > 0 and report["ps_train_images"] > report["train_images"]
    largest, basis = report["subnets"]["largest"]["scratch"], report["budget_basis"]
    # the budget divides by the largest twin's run at its converged epoch count (or its longest run)
    expected = largest["converged_epochs"] or max(map(int, largest["longer"]))
    assert basis["epochs"] == expected
    assert basis["seconds"] == (largest["seconds"] if expected == 2 else largest["longer_cost"][str(expected)][0])
    assert report["within_budget"] == (report["ps_seconds"] <= 4 * basis["seconds"])
    # 2 supernets + (2 grid + 1 other seed + the longer runs) x 4 subnets, each cached as JSON
    cached = sorted(tmp_path.rglob("*.json"))
    assert len(cached) == 2 + sum(3 + len(r["scratch"]["longer"]) for r in report["subnets"].values())
    stamps = {p: p.stat().st_mtime_ns for p in cached}
    assert ps_vs_scratch.main(argv) == 0  # a rerun trains nothing and reports the same figures
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again == report and {p: p.stat().st_mtime_ns for p in sorted(tmp_path.rglob("*.json"))} == stamps
    table = run_all._ps_table(report)  # how bench/RESULTS.md shows it
    assert [line.split(" | ")[0] for line in table[2:6]] == ["| smallest", "| middle", "| largest", "| random_1"]
    assert f"{report['subnets']['largest']['delta']:+.2f}" in table[4] and "budget 4" in table[-1]


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


def test_ablation_records_a_run_and_renders_the_docs_table_from_records(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ps_ablation, "RECORDS", tmp_path / "records.json")
    monkeypatch.setattr(ps_ablation, "DOC", tmp_path / "page.md")
    (tmp_path / "page.md").write_text(f"intro\n{ps_ablation.BEGIN}\nstale\n{ps_ablation.END}\noutro\n")
    common = [
        "--recipe",
        str(TINY_RECIPE),
        "--scratch-epochs",
        "2",
        "--lr-factors",
        "1",
        "--no-convergence",
        "--cache",
        str(tmp_path / "cache"),
        "--proxy",
        "data.batch_size=16",
    ]
    assert ps_ablation.main(["--name", "a", "--change", "as is", *common]) == 0
    assert ps_ablation.main(["--name", "b", "--change", "no KD", "--set", "distill.ratio=0", *common]) == 0
    records = json.loads((tmp_path / "records.json").read_text())
    assert [r["name"] for r in records] == ["a", "b"] and records[1]["overrides"] == ["distill.ratio=0"]
    assert records[0]["recipe_digest"] != records[1]["recipe_digest"]
    assert records[0]["subnets"]["largest"]["scratch"] == records[1]["subnets"]["largest"]["scratch"]  # one twin
    page = (tmp_path / "page.md").read_text()
    assert page.startswith("intro\n") and page.endswith("outro\n") and "stale" not in page
    row = next(line for line in page.splitlines() if line.startswith("| b |"))
    assert f"{records[1]['subnets']['smallest']['ps']:.2f} ({records[1]['subnets']['smallest']['delta']:+.2f})" in row


def test_sides_run_apart_fill_the_cache_of_the_full_report(tmp_path, capsys):
    """Two processes (one per side, e.g. one per core) leave a cache the full report only reads."""
    common = ["--recipe", str(TINY_RECIPE), "--seeds", "0", "--random", "0", "--scratch-epochs", "2"]
    common += ["--lr-factors", "1", "--no-convergence", "--cache", str(tmp_path)]
    threads = torch.get_num_threads()
    try:
        assert (
            ps_vs_scratch.main([*common, "--side", "scratch", "--subnets", "largest", "smallest", "--threads", "1"])
            == 0
        )
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    capsys.readouterr()
    assert ps_vs_scratch.main([*common, "--side", "scratch", "--subnets", "largest", "smallest", "--json"]) == 0
    scratch = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert scratch["side"] == "scratch" and list(scratch["twins"]) == ["largest", "smallest"]
    assert ps_vs_scratch.main([*common, "--side", "ps", "--subnets", "largest", "smallest", "--json"]) == 0
    ps = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert ps["side"] == "ps" and set(ps["top1"][0]) == {"largest", "smallest"}
    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.json")}
    assert ps_vs_scratch.main([*common, "--subnets", "largest", "smallest", "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.json")} == stamps  # nothing trained again
    assert report["subnets"]["largest"]["ps_top1"] == ps["top1"][0]["largest"]
    assert report["subnets"]["smallest"]["scratch"]["test_top1"] == scratch["twins"]["smallest"]["test_top1"]
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
