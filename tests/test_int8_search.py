"""The search in INT8: INT8 accuracy data (collect), INT8 predictors (fit on INT8 top-1 or on the drop), the
search refusing files of the other dtype in one line, and the digits-sized pipeline in INT8 end to end."""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import FAST, TINY_RECIPE, known_call_ms, perturb, synthetic_table, tiny_space

from ofa.cli import main
from ofa.data.datasets import data_from_meta
from ofa.export import steps
from ofa.export.int8_accuracy import int8_top1
from ofa.families.mbv3.encoding import GeneLayout
from ofa.families.mbv3.space import SearchSpace
from ofa.families.mbv3.supernet import OFAMobileNetV3
from ofa.lut.build import TableBuildConfig, build_table
from ofa.pipeline import Pipeline, PipelineConfig
from ofa.pipeline import stages as pipeline_stages
from ofa.utils.errors import OFAError
from ofa.utils.io import read_json, read_yaml
from search.find import search_device
from search.latency import LatencyTable, save_table
from search.predictor.accuracy_file import AccuracyData, load_accuracy, read_accuracy
from search.predictor.collect import CollectConfig, collect
from search.predictor.fit import FitConfig, fit_predictor
from search.predictor.model import AccuracyPredictor
from search.search_config import SearchConfig

DATA = {
    "name": "synthetic",
    "image_size": 8,
    "batch_size": 16,
    "val_fraction": 0.3,
    "synthetic": {"train_size": 60, "test_size": 16, "num_classes": 4, "channels": 1},
}


def small_fit(**kwargs) -> FitConfig:
    """The predictor fits of these tests: a 32-wide MLP, not OFA's 3 x 400, and a short patience."""
    return FitConfig(**kwargs, hidden=32, patience=10)


def small_space() -> SearchSpace:
    return tiny_space(in_channels=1, num_classes=4, resolutions=(8,), kernels=(3,), expands=(2,), depths=(1,))


def table_file(space: SearchSpace, path: Path, dtype: str | None, backend: str = "ort-cpu") -> Path:
    """`synthetic_table` written to ``path``; ``dtype`` None: a table from before INT8 (float32)."""
    table = synthetic_table(space, dtype=dtype, backend=backend)
    return save_table(path, table.meta, table.entries)


@pytest.fixture(scope="module")
def supernet(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    net = perturb(OFAMobileNetV3(small_space())).eval()
    path = tmp_path_factory.mktemp("net") / "supernet.pt"
    net.save(path, meta={"data": DATA})
    return path


def test_collect_int8_records_both_top1_calibrated_as_export(supernet, tmp_path, monkeypatch):
    net = OFAMobileNetV3.load(supernet)
    data = data_from_meta(net.meta)
    calls = []
    real = steps.calibration_batches

    def spy(train, batch, images, resolution, seed):
        calls.append((train, batch, images, resolution, seed))
        return real(train, batch, images, resolution, seed)

    monkeypatch.setattr(steps, "calibration_batches", spy)
    cfg = CollectConfig(2, seed=3, calib_batches=2, batch_size=8, dtype="int8", progress=False)
    out = tmp_path / "acc.jsonl"
    assert collect(net, data, out, cfg, int8=int8_top1).measured == 2
    header, recs = read_accuracy(out)
    assert header["dtype"] == "int8" and "export --int8" in header["int8"]["calibration"]
    assert all(0 <= r["top1_int8"] <= 100 and 0 <= r["top1"] <= 100 for r in recs)
    # export's calibration images: training images, calib_batches x batch_size of them, the collection's seed
    assert [c[1:] for c in calls] == [(8, 16, 8, 3)] * 2 and all(c[0] is data.train for c in calls)
    loaded = load_accuracy(out)
    assert loaded.dtype == "int8" and np.array_equal(loaded.top1_int8, [r["top1_int8"] for r in recs])

    with pytest.raises(OFAError, match=r"dtype='int8', this run has 'float32'"):
        collect(net, data, out, CollectConfig(3, seed=3, calib_batches=2, batch_size=8, progress=False))
    with pytest.raises(OFAError, match=r"^dtype / --dtype int8: no INT8 measurement"):
        collect(net, data, tmp_path / "other.jsonl", cfg)
    with pytest.raises(OFAError, match=r"^dtype / --dtype: unknown dtype 'fp16'"):
        CollectConfig(dtype="fp16")


def test_fit_int8_data_on_both_targets_keeps_the_lower_early_stop_error(tmp_path):
    space = tiny_space()
    layout = GeneLayout.of(space)
    rows = layout.sample(240, np.random.default_rng(0))
    top1 = 70 + 2.0 * rows[:, layout.resolution] + 0.3 * rows.sum(1) / rows.shape[1]
    drop = 0.5 + 0.4 * (rows[:, layout.slices["kernels"]] == 0).mean(1)  # quantization costs some subnets more
    data = AccuracyData(space, rows, top1, None, {"dtype": "int8"}, top1 - drop)
    cfg = FitConfig(seed=0, max_epochs=40, patience=10, hidden=32, layers=2)
    fit = fit_predictor(data, cfg)
    report, targets = fit.report, fit.report.targets
    assert set(targets) == {"int8", "drop"} and report.dtype == "int8"
    assert report.target == min(targets, key=lambda t: targets[t]["stop_rmse"])
    assert fit.predictor.metrics["targets"] == targets and "INT8 top-1 fitted on" in report.summary()

    drop_fit = fit_predictor(data, FitConfig(**{**cfg.__dict__, "target": "drop"}))
    assert drop_fit.report.target == "drop" and drop_fit.predictor.base is not None
    path = drop_fit.predictor.save(tmp_path / "p.pt")
    again = AccuracyPredictor.load(path)  # the float32 base travels in the same file
    assert again.dtype == "int8" and np.allclose(again.predict_batch(rows), drop_fit.predictor.predict_batch(rows))
    direct = fit_predictor(data, FitConfig(**{**cfg.__dict__, "target": "int8"}))
    assert direct.predictor.base is None and set(direct.report.targets) == {"int8"}

    with pytest.raises(OFAError, match=r"^target / --target drop: the data is float32"):
        fit_predictor(AccuracyData(space, rows, top1, None, {}), FitConfig(target="drop"))
    with pytest.raises(OFAError, match=r"^target / --target: unknown target 'fp32'"):
        FitConfig(target="fp32")


@pytest.mark.parametrize(
    ("table_dtype", "predictor_dtype", "search_dtype", "says"),
    [
        ("int8", "float32", "float32", r"table\.yaml: latency table measured in int8, but the search is in float32"),
        (None, "int8", "int8", r"table\.yaml: latency table measured in float32, but the search is in int8"),
        ("int8", "float32", "int8", r"p\.pt: accuracy predictor of top-1 in float32, but the search is in int8"),
    ],
)
def test_search_refuses_the_other_dtype_in_one_line(table_dtype, predictor_dtype, search_dtype, says, tmp_path):
    space = small_space()
    table = LatencyTable.load(table_file(space, tmp_path / "table.yaml", table_dtype))
    predictor = AccuracyPredictor.load(AccuracyPredictor(space, 8, 1, dtype=predictor_dtype).save(tmp_path / "p.pt"))
    with pytest.raises(OFAError, match=says) as info:
        search_device(space, predictor, table, SearchConfig((5.0,), dtype=search_dtype))
    assert "\n" not in str(info.value) and "(dtype / --dtype)" in str(info.value)
    with pytest.raises(OFAError, match=r"^dtype / --dtype: unknown dtype 'bf16'"):
        SearchConfig((5.0,), dtype="bf16")


def test_search_cli_bad_dtype_is_one_line(supernet, tmp_path, capsys):
    space = small_space()
    lut = table_file(space, tmp_path / "table.yaml", "int8")
    predictor = AccuracyPredictor(space, 8, 1).save(tmp_path / "p.pt")
    argv = ["search", "--supernet", str(supernet), "--predictor", str(predictor), "--lut", str(lut)]
    for extra, says in ((["--dtype", "fp16"], "invalid choice: 'fp16'"), ([], "measured in int8")):
        with pytest.raises(SystemExit) if extra else nullcontext():
            assert main([*argv, "--latency-ms", "5", *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err


def test_pipeline_runs_in_int8_end_to_end(tmp_path, monkeypatch, no_curves):  # no curves PNG: not read here
    space = SearchSpace.from_dict(read_yaml(TINY_RECIPE)["space"])
    table = tmp_path / "int8.yaml"
    one = dict(dtype="int8", resolutions=(8,), calibrate=0, protocol=FAST, max_noise_pct=1e6, progress=False)
    build_table(space, TableBuildConfig(table, **one))  # one resolution: the pipeline searches only it
    out = tmp_path / "run"
    known_call_ms(monkeypatch, 0.25)  # every timed call from here reads 0.25 ms
    monkeypatch.setattr(pipeline_stages, "FitConfig", small_fit)
    # what is trained does not matter here, only that every stage runs in INT8
    short = ("phases.full.epochs=1", "data.synthetic.train_size=96")
    run = PipelineConfig(
        TINY_RECIPE, out, short, subnets=10, calib_batches=1, lut=table, dtype="int8", targets_ms=(1e3,)
    )
    result = Pipeline(run, log=lambda _: None).run()
    header, recs = read_accuracy(out / "acc.jsonl")
    assert header["dtype"] == "int8" and len(recs) == 10 and all("top1_int8" in r for r in recs)
    assert AccuracyPredictor.load(out / "predictor.pt").dtype == "int8"
    assert read_json(out / "search" / "search.json", "search")["dtype"] == "int8"
    (row,) = result.rows
    exported = json.loads(Path(row["onnx"]).with_suffix(".export.json").read_text())
    assert exported["table_dtype"] == "int8" and exported["top1_int8"] is not None
    assert row["measured_ms"] == exported["latency_int8"]["mean_ms"] == 0.25  # the INT8 model's, beside its prediction
    assert row["predicted_ms"] == exported["predicted_latency_ms"] <= 1e3
    assert "INT8 predicted by table" in Path(row["onnx"]).with_suffix(".md").read_text()


def test_export_puts_an_int8_tables_prediction_beside_the_measured_int8_latency(
    supernet, tmp_path, monkeypatch, capsys
):
    from dataclasses import replace

    from ofa.export import export as export_module

    real = export_module.measure_latencies

    def int8_slower(models, *args):  # the two models read apart, so it shows which one the table is put beside
        measured = real(models, *args)
        return {**measured, "int8": replace(measured["int8"], mean_ms=2 * measured["fp32"].mean_ms)}

    known_call_ms(monkeypatch, 0.25)
    monkeypatch.setattr(export_module, "measure_latencies", int8_slower)
    space = small_space()
    lut = table_file(space, tmp_path / "int8.yaml", "int8")
    arch = space.min_arch(8).with_extra({"target_ms": 0.4}).save(tmp_path / "arch.json")
    argv = ["export", "--supernet", str(supernet), "--arch", str(arch), "--lut", str(lut), "--calib-batches", "1"]
    assert main([*argv, "--out", str(tmp_path / "fp32.onnx")]) == 2
    err = [x for x in capsys.readouterr().err.strip().splitlines() if not x.startswith("note:")]  # hand-written arch
    assert len(err) == 1 and "an INT8 latency table predicts the INT8 model's latency: add --int8" in err[0]
    # an OpenVINO INT8 table predicts NNCF's models, not the QDQ model --int8 ships: refused before any work
    ov = table_file(space, tmp_path / "ov-int8.yaml", "int8", backend="openvino-cpu")
    ov_argv = [str(ov) if a == str(lut) else a for a in argv] + ["--int8", "--out", str(tmp_path / "ov.onnx")]
    assert main(ov_argv) == 2
    err = [x for x in capsys.readouterr().err.strip().splitlines() if not x.startswith("note:")]
    assert len(err) == 1 and "INT8 table of 'openvino-cpu'" in err[0] and "give an ort-cpu INT8 table" in err[0]
    assert not list(tmp_path.glob("ov*.onnx"))

    assert main([*argv, "--int8", "--out", str(tmp_path / "m.onnx")]) == 0
    predicted = LatencyTable.load(lut).predict(space.min_arch(8))
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("  latency ("))
    assert line.endswith(
        f"int8 0.5 ± 0 ms; INT8 table predicts {predicted:.3g} ms ({100 * (0.5 / predicted - 1):+.1f}%)"
    )
    result = json.loads((tmp_path / "m.export.json").read_text())
    assert result["table_dtype"] == "int8" and result["predicted_latency_ms"] == pytest.approx(predicted)
    assert result["budget"]["measured_ms"] == result["latency_int8"]["mean_ms"] == 0.5  # judged on the INT8 model
    assert "--dtype int8" in result["budget"]["advice"]  # over budget: rebuild the INT8 table here
    assert "| latency, INT8 predicted by table |" in (tmp_path / "m.md").read_text()


def test_int8_search_bench_ships_both_picks_in_int8_on_the_same_test_images(tmp_path, monkeypatch, capsys, no_curves):
    """`bench.int8_search` on the tiny recipe: both searches' picks exported in INT8, scored paired on the
    test split, timed whole; the INT8 table judged by `lut check`."""
    from bench import int8_search, search_quality_measure

    monkeypatch.setattr(int8_search, "FitConfig", small_fit)  # small MLPs,
    monkeypatch.setattr(search_quality_measure, "Standalone", lambda budget_s: FAST)  # quick tables,
    quick = search_quality_measure.TableBuildConfig
    monkeypatch.setattr(search_quality_measure, "TableBuildConfig", lambda **k: quick(**k, calibrate=2))  # 2 subnets
    argv = ["--recipe", str(TINY_RECIPE), "--set", "checkpoint.every_steps=0", "--set", "space.resolutions=[8]"]
    argv += ["--set", "phases.full.epochs=1", "--set", "data.synthetic.train_size=96", "--subnets", "10"]  # short
    argv += ["--calib-batches", "1", "--check", "2", "--fractions", "0.3", "0.8", "--cache", str(tmp_path / "c")]
    argv += ["--tables", str(tmp_path / "c"), "--runs", str(tmp_path / "runs")]
    assert int8_search.main([*argv, "--json"]) == 0
    *text, last = capsys.readouterr().out.strip().splitlines()
    report = json.loads(last)
    assert sum(line.startswith("| ") and line[2].isdigit() for line in text) == 2  # one row per budget
    assert any(line.startswith("INT8 table check: ") for line in text)
    tables = {d: read_yaml(Path(p)) for d, p in report["tables"].items()}
    assert {d: t["meta"]["dtype"] for d, t in tables.items()} == {"float32": "float32", "int8": "int8"}
    assert len(report["budgets"]) == 2 and report["predictors"]["subnets"] == 10
    assert report["predictors"]["int8_target"] in ("int8", "drop")
    for row in report["budgets"]:
        f, q = row["float32"], row["int8"]
        assert f["test_images"] == q["test_images"] == 64  # the tiny recipe's test split, both on the same images
        assert row["delta_top1"] == pytest.approx(q["top1_int8"] - f["top1_int8"], abs=1e-9)
        assert row["delta_se"] >= 0 and (not row["same_subnet"] or (f == q and row["delta_top1"] == 0))
        assert q["predicted_int8_ms"] <= row["budget_ms"] and q["measured_int8_ms"] > 0
    check = report["int8_table_check"]
    assert check["all"]["n"] == 2 * len(tables["int8"]["meta"]["resolutions_done"])


def test_int8_search_bench_without_its_data_says_so_and_writes_nothing(tmp_path, capsys):
    from bench import int8_search

    argv = ["--recipe", "fashion", "--set", f"data.root={tmp_path / 'none'}", "--cache", str(tmp_path / "c")]
    assert int8_search.main([*argv, "--runs", str(tmp_path / "runs"), "--json"]) == 0
    first, last = capsys.readouterr().out.strip().splitlines()
    assert first.startswith("int8_search: skipped: ") and "dataset-fashion-mnist" in first
    assert json.loads(last)["skipped"] and not list(tmp_path.iterdir())
