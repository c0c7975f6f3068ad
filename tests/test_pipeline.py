"""End to end: recipe → supernet → table → predictor → search → ONNX, and resume skips finished stages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import TINY_RECIPE as RECIPE

from ofa.cli import main
from ofa.deploy.lut_build import TableBuildConfig, build_table
from ofa.deploy.timing import Standalone
from ofa.errors import OFAError
from ofa.io import read_yaml
from ofa.pipeline import Pipeline, PipelineConfig, find_shipped_table
from ofa.space import SearchSpace

FAST = Standalone(warmup=1, calls=3, blocks=3)


def run(cfg: PipelineConfig) -> tuple[dict, list[str], list[str]]:
    lines: list[str] = []
    result = Pipeline(cfg, log=lines.append).run()
    return {"rows": result.rows, "plots": result.plots}, result.ran, lines


def test_pipeline_end_to_end_and_resume(tmp_path):
    space = SearchSpace.from_dict(read_yaml(RECIPE)["space"])
    table = tmp_path / "table.yaml"
    build_table(space, TableBuildConfig(table, protocol=FAST, calibrate=3, max_noise_pct=100.0, progress=False))
    out = tmp_path / "run"
    cfg = PipelineConfig(recipe=RECIPE, out=out, subnets=12, lut=table)

    summary, calls, _ = run(cfg)
    assert calls[:4] == ["train", "collect", "fit", "search"] and len(calls) == 8
    assert all(c.startswith("export arch_") for c in calls[4:])
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
    rows = summary["rows"]
    assert len(rows) == 4
    targets = [r["target_ms"] for r in rows]
    assert targets == sorted(targets) and len(set(targets)) == 4
    for r in rows:
        assert Path(r["onnx"]).is_file()
        assert Path(r["onnx"]).with_suffix(".pt").is_file() and Path(r["onnx"]).with_suffix(".md").is_file()
        assert r["predicted_ms"] <= r["target_ms"] + 1e-9
        assert 0 <= r["test_top1"] <= 100 and r["measured_ms"] > 0 and r["macs"] > 0
    assert "| target ms |" in (out / "summary.md").read_text()

    # Rerun: everything is up to date, no verb runs, same summary.
    again, calls, lines = run(cfg)
    assert calls == []
    assert sum("up to date" in line for line in lines) == 8
    assert again["rows"] == rows

    # An interrupted export (its outputs gone) is the only stage redone.
    victim = Path(rows[1]["onnx"])
    victim.unlink()
    _, calls, _ = run(cfg)
    assert calls == [f"export {victim.stem}"]
    assert victim.is_file()

    # A changed recipe is refused instead of mixing two runs in one folder.
    changed = PipelineConfig(recipe=RECIPE, out=out, subnets=12, lut=table, overrides=["phases.full.epochs=3"])
    with pytest.raises(OFAError, match=r"stage 'train': .*phases\[.*\]\.epochs is 3, but .* was trained with 2"):
        run(changed)
    assert json.loads((out / "pipeline.json").read_text())["train"]


def test_pipeline_cli_rejects_bad_flags(tmp_path, capsys):
    assert main(["pipeline", str(RECIPE), "--out", str(tmp_path / "x"), "--subnets", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--subnets must be at least 10" in err[0]
    assert main(["pipeline", str(tmp_path / "missing.yaml"), "--out", str(tmp_path / "y")]) == 2
    assert "missing.yaml" in capsys.readouterr().err


def test_no_shipped_table_for_an_unmeasured_space():
    space = SearchSpace.from_dict(read_yaml(RECIPE)["space"])
    assert find_shipped_table(space) is None
