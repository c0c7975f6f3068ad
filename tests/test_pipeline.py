"""End to end: recipe → supernet → table → predictor → search → ONNX, and resume skips finished stages."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import FAST, known_call_ms, onnx_top1
from helpers import TINY_RECIPE as RECIPE

from ofa.cli import main
from ofa.data.datasets import build_data
from ofa.export.budget import budget_verdict
from ofa.export.result import BudgetVerdict
from ofa.families.mbv3.space import SearchSpace
from ofa.lut import build as lut_build
from ofa.lut.build import TableBuildConfig, build_table
from ofa.lut.measure import Latency
from ofa.lut.protocols import time_models
from ofa.pipeline import Pipeline, PipelineConfig, budget_cell, budget_notes, round_up
from ofa.pipeline import stages as pipeline_module
from ofa.train import load_recipe
from ofa.utils.errors import OFAError
from ofa.utils.io import read_yaml

# One resolution and a smaller training split keep the end-to-end run quick; every stage still runs.
SMALL = ("space.resolutions=[8]", "data.synthetic.train_size=96")


def run(cfg: PipelineConfig) -> tuple[dict, list[str], list[str]]:
    lines: list[str] = []
    result = Pipeline(cfg, log=lines.append).run()
    return {"rows": result.rows, "plots": result.plots, "seconds": result.seconds}, result.ran, lines


def test_pipeline_end_to_end_and_resume(tmp_path, monkeypatch):
    space = load_recipe(RECIPE, list(SMALL)).space
    table = tmp_path / "table.yaml"
    build_table(space, TableBuildConfig(table, protocol=FAST, calibrate=2, max_noise_pct=100.0, progress=False))
    out = tmp_path / "run"
    cfg = PipelineConfig(recipe=RECIPE, out=out, overrides=SMALL, subnets=12, lut=table, threads=1)

    known_call_ms(monkeypatch, 0.25)  # from here on every timed call reads 0.25 ms: the exports' latency
    threads, collect = [], pipeline_module.collect  # the stages run on the pipeline's threads, restored after
    monkeypatch.setattr(pipeline_module, "collect", lambda *a: threads.append(torch.get_num_threads()) or collect(*a))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        summary, calls, _ = run(cfg)
        assert threads == [1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    rows = summary["rows"]
    assert calls[:4] == ["train", "collect", "fit", "search"]
    first_export = {}  # each distinct subnet is exported once, under the first budget that picked it
    for r in rows:
        first_export.setdefault(r["arch"], f"export {Path(r['onnx']).stem}")
    assert calls[4:] == list(first_export.values())
    stages = len(calls)
    for name in (
        "supernet.pt",
        "recipe.yaml",
        "metrics.jsonl",
        "acc.jsonl",
        "predictor.pt",
        "search/search.json",
        "search/pareto.png",
        "search/pareto.json",
        "summary.md",
        "summary.json",
        "pipeline.json",
    ):
        assert (out / name).is_file(), name
    assert any(p.endswith(".png") and "curve" in p for p in summary["plots"])  # training curves
    assert len(rows) == 4
    test_images = build_data(load_recipe(RECIPE, list(SMALL)).data).test
    targets = [r["target_ms"] for r in rows]
    assert targets == sorted(targets) and len(set(targets)) == 4
    for r in rows:
        assert Path(r["onnx"]).is_file()
        assert Path(r["onnx"]).with_suffix(".pt").is_file() and Path(r["onnx"]).with_suffix(".md").is_file()
        assert r["predicted_ms"] <= r["target_ms"] + 1e-9
        assert r["test_top1"] == onnx_top1(r["onnx"], test_images) and r["measured_ms"] == 0.25 and r["macs"] > 0
    assert "| target ms |" in (out / "summary.md").read_text()
    seconds = summary["seconds"]  # where the time went, in the summary files too
    assert list(seconds) == ["train", "collect", "lut", "fit", "search", "export"] and seconds["train"] > 0
    assert json.loads((out / "summary.json").read_text())["stage_seconds"] == seconds
    assert f"train {seconds['train']:.1f}" in (out / "summary.md").read_text()

    # Rerun: everything is up to date, no verb runs, same summary.
    again, calls, lines = run(cfg)
    assert calls == []
    assert again["seconds"]["train"] < seconds["train"]  # skipped: the check of its inputs only
    assert sum("up to date" in line for line in lines) == stages
    assert again["rows"] == rows

    # An interrupted export (its outputs gone) is the only stage redone.
    victim = Path(rows[1]["onnx"])
    victim.unlink()
    _, calls, _ = run(cfg)
    assert calls == [f"export {victim.stem}"]
    assert victim.is_file()

    # Two budgets above the largest subnet pick it twice: one export serves both, each judged on its own budget.
    shared, calls, _ = run(replace(cfg, targets_ms=(1000.0, 2000.0)))
    assert calls == ["search", "export arch_1000ms"]
    low, high = shared["rows"]
    assert low["onnx"] == high["onnx"] and Path(low["onnx"]).name == "arch_1000ms.onnx"
    assert [low["target_ms"], high["target_ms"]] == [1000.0, 2000.0]
    assert [low["budget"]["target_ms"], high["budget"]["target_ms"]] == [1000.0, 2000.0]
    assert high["budget"]["over_pct"] < low["budget"]["over_pct"] < -99

    # A changed recipe is refused instead of mixing two runs in one folder.
    changed = PipelineConfig(recipe=RECIPE, out=out, subnets=12, lut=table, overrides=[*SMALL, "phases.full.epochs=3"])
    with pytest.raises(OFAError, match=r"stage 'train': .*phases\[.*\]\.epochs is 3, but .* was trained with 2"):
        run(changed)
    assert json.loads((out / "pipeline.json").read_text())["train"]


def test_pipeline_cli_rejects_bad_flags(tmp_path, capsys):
    assert main(["pipeline", str(RECIPE), "--out", str(tmp_path / "x"), "--subnets", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--subnets must be at least 10" in err[0]
    assert main(["pipeline", str(tmp_path / "missing.yaml"), "--out", str(tmp_path / "y")]) == 2
    assert "missing.yaml" in capsys.readouterr().err


def test_pipeline_builds_its_table_here_and_a_strict_limit_stops_it_in_one_line(tmp_path, monkeypatch):
    space = SearchSpace.from_dict(read_yaml(RECIPE)["space"])
    noisy = lambda models, protocol, progress=None: {  # noqa: E731
        k: {**s, "ci_pct": 30.0} for k, s in time_models(models, protocol).items()
    }
    monkeypatch.setattr(lut_build, "time_models", noisy)
    protocols: list[dict] = []
    monkeypatch.setattr(pipeline_module, "Standalone", lambda **kw: protocols.append(kw) or FAST)
    two = lambda **kw: TableBuildConfig(**{**kw, "calibrate": 2})  # noqa: E731  (2 whole subnets, not 10, each)
    monkeypatch.setattr(pipeline_module, "TableBuildConfig", two)
    pipeline = Pipeline(PipelineConfig(recipe=RECIPE, out=tmp_path / "run", max_noise_pct=5.0), log=lambda _: None)
    with pytest.raises(OFAError, match=r"^stage 'lut': .*too noisy to measure at \d+ px: .*±30\.0%") as info:
        pipeline.stage("lut", lambda: pipeline.latency_table(space))
    assert "\n" not in str(info.value) and not (tmp_path / "run" / "latency_table.yaml").exists()

    lines: list[str] = []
    lut = {"lut_budget_s": 0.3, "lut_block_ms": 7.0, "lut_blocks": 6, "lut_reference_every": 2}
    config = PipelineConfig(recipe=RECIPE, out=tmp_path / "warned", **lut)
    path, table = Pipeline(config, log=lines.append).latency_table(space)  # default: warn, write, go on
    assert protocols[-1] == {"blocks": 6, "budget_s": 0.3, "block_ms": 7.0, "reference_every": 2}  # from the settings
    assert path == tmp_path / "warned" / "latency_table.yaml" and table.noise_pct() == 30.0
    assert sum("warning:" in line and "±30.0%" in line for line in lines) == len(space.resolutions)
    assert all(r["noisy"] for r in table.meta["noise"]["per_resolution"].values())

    # Other table settings on the same run folder: the pipeline's own table is stale, so it is built again (the
    # build alone would refuse to resume a file measured with another protocol).
    monkeypatch.setattr(pipeline_module, "Standalone", lambda **kw: replace(FAST, blocks=kw["blocks"]))
    lines.clear()
    _, rebuilt = Pipeline(replace(config, lut_blocks=4), log=lines.append).latency_table(space)
    assert rebuilt.meta["protocol"]["blocks"] == 4
    assert any("table settings changed: rebuilding" in line for line in lines)


def test_a_measured_latency_over_budget_is_flagged_with_what_to_do():
    elsewhere = BudgetVerdict(0.031, 0.108, 2.5, "Intel Xeon", "AMD EPYC", advice="build a table on this machine: x")
    assert elsewhere.over_budget and round(elsewhere.over_pct) == 248 and elsewhere.other_machine
    line = elsewhere.line()
    assert "0.108 ms is 248% over its 0.031 ms budget" in line and "±2.5%" in line and "Intel Xeon" in line
    assert line.endswith("build a table on this machine: x")
    within = BudgetVerdict(0.05, 0.051, 3.0, "AMD EPYC", "AMD EPYC")  # 2% over, inside the table's ±3%
    assert not within.over_budget and within.line() == ""
    # 3% over a table measured to ±2%: within once the measurement's own ±1.5% is added, over without it
    table = SimpleNamespace(meta={"cpu": "AMD EPYC"}, noise_pct=lambda: 2.0, dtype="float32")
    arch = SimpleNamespace(extra={"target_ms": 0.05})
    timed = [Latency(0.0515, 0.001, 1, 1, 20, "standalone", ci_pct=ci) for ci in (1.5, None)]
    verdicts = [budget_verdict(arch, m, table) for m in timed]
    assert [v.margin_pct for v in verdicts] == [3.5, 2.0] and [v.over_budget for v in verdicts] == [False, True]
    rows = [
        {"target_ms": 0.031, "budget": elsewhere.to_dict(), "table_noise_pct": 2.5},
        {"target_ms": 0.05, "budget": within.to_dict(), "table_noise_pct": 2.5},
    ]
    assert [budget_cell(r["budget"]) for r in rows] == ["OVER +248%", "met"]
    notes = budget_notes(rows)
    assert len(notes) == 2 and notes[0].startswith("target 0.031 ms: measured 0.108 ms") and "±2.5%" in notes[1]


def test_default_budgets_round_up_so_the_smallest_stays_reachable():
    # To the nearest digit 0.019601 ms printed as 0.0196 ms, under the cheapest subnet it was placed above.
    assert round_up(0.019601) == 0.01961 and round_up(0.0196) == 0.0196 and round_up(0.99999) == 1.0
    values = np.random.default_rng(0).uniform(-6, 4, 20_000)
    for value in 10.0**values:
        budget = round_up(value)
        assert value <= budget <= value * 1.001 and float(f"{budget:.4g}") == budget
