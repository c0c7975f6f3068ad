"""From an official OFA checkpoint to a verified ONNX model for the user's data and device.

import (re-headed for digits: 1 channel, 10 classes) → short fine-tune of the whole supernet →
latency table → predictor → search → export with ONNX parity. Small on purpose: one resolution
(40 px), few subnets for the predictor, a table measured with few rounds, few digits.

The parity check stays the export's own (1e-4 absolute), so the setup must give a network whose
float32 rounding is ordinary: at 40 px the last stage still sees 2x2 pixels (40 → 20 → 10 → 5 → 3 → 2;
at 32 px it sees one, and BN recalibrated there finds channels of near-zero variance whose gain of
~1/sqrt(eps) amplifies rounding towards the limit), and a short fine-tune adapts the fresh classifier
so that the random parity inputs no longer give outsized logits.
"""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
import yaml
from helpers import known_call_ms, onnx_top1, synthetic_table

from ofa.cli import main
from ofa.data.datasets import build_data
from ofa.families.mbv3.supernet import OFAMobileNetV3
from ofa.pipeline import Pipeline, PipelineConfig
from ofa.runtime.convert import read_metadata
from ofa.train import load_recipe
from search.latency import save_table

# No training-curves PNG (tests/conftest.py `no_curves`): no test here reads it, and drawing it is a fair share
# of a fine-tune this small.
pytestmark = pytest.mark.usefixtures("no_curves")
RESOLUTION = 40  # one resolution, whose last stage sees 2x2 pixels (see above)
CHECKPOINT = Path(__file__).resolve().parent / "fixtures" / "ofa_mbv3_w0.5_c10_random.pth"


def test_official_checkpoint_to_onnx_for_digits(tmp_path, capsys, monkeypatch):
    imported = tmp_path / "imported.pt"
    assert main(["import", str(CHECKPOINT), "--out", str(imported), "--num-classes", "10", "--in-channels", "1"]) == 0
    recipe = tmp_path / "digits_from_official.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {
                "init": {"supernet": str(imported)},
                "space": {"resolutions": [RESOLUTION]},
                "data": {
                    "name": "digits",
                    "image_size": RESOLUTION,
                    "batch_size": 64,
                    "eval_batch_size": 256,
                    "test_fraction": 0.5,
                    # seeded stratified subsets: 100 of the ~900 test digits (enough to compare top-1s, and more
                    # than the export's 64 real parity inputs), and 320 of the training ones, a quarter of them
                    # validation (the predictor's subnets' scores)
                    "test_subset": 100,
                    "train_subset": 320,
                    "val_fraction": 0.25,
                },
                "phases": [{"name": "finetune", "epochs": 1, "lr": 0.02}],
                "eval": {"calib_batches": 1, "subnets": "minmax"},
            }
        )
    )
    space = load_recipe(recipe).space
    assert (space.in_channels, space.num_classes, space.feature_channels) == (1, 10, 640)
    # A made-up table: timing is not what this test is about (building a real one would be a third of its time).
    made_up = synthetic_table(space)
    table = save_table(tmp_path / "table.yaml", made_up.meta, made_up.entries)
    # A budget near the smallest subnet keeps the export (and the search's answer) quick.
    budget = 1.1 * made_up.predict(space.min_arch(RESOLUTION))
    out = tmp_path / "run"
    lines: list[str] = []
    known_call_ms(monkeypatch, 0.25)  # from here on every timed call reads 0.25 ms: the export's latency
    summary = Pipeline(
        PipelineConfig(
            recipe=recipe, out=out, subnets=10, calib_batches=1, lut=table, targets_ms=(float(f"{budget:.4g}"),)
        ),
        log=lines.append,
    ).run()

    tuned = OFAMobileNetV3.load(out / "supernet.pt")
    assert tuned.space == space and "fresh_classifier" not in tuned.meta  # the whole supernet was fine-tuned
    (row,) = summary.rows
    result = json.loads(Path(row["onnx"]).with_suffix(".export.json").read_text())
    parity = result["parity"]
    # accurate in absolute terms too (`allowed` grows with the logits, which the fine-tune can push past 90)
    assert parity["ok"] and parity["max_abs_diff"] <= parity["allowed"] and parity["max_abs_diff"] < 1e-3
    assert parity["top1_agreement"] == 1.0
    assert result["bn_batches"] > 0  # recalibrated on the digits the supernet was fine-tuned on
    assert row["test_top1"] == onnx_top1(row["onnx"], build_data(load_recipe(recipe).data).test)
    assert row["measured_ms"] == 0.25
    meta = read_metadata(onnx.load(row["onnx"]))
    assert meta["arch"].resolution == RESOLUTION and len(meta["mean"]) == 1


def test_export_of_an_imported_subnet_carries_official_preprocessing_and_warns(tmp_path, capsys):
    imported = tmp_path / "imported.pt"
    assert main(["import", str(CHECKPOINT), "--out", str(imported)]) == 0
    arch = OFAMobileNetV3.load(imported).space.min_arch(128).save(tmp_path / "arch.json")
    onnx_path = tmp_path / "small.onnx"
    assert (
        main(["export", "--supernet", str(imported), "--arch", str(arch), "--out", str(onnx_path), "--no-latency"]) == 0
    )
    assert "accuracy WILL SUFFER" in capsys.readouterr().err
    meta = read_metadata(onnx.load(onnx_path))
    assert meta["mean"] == [0.485, 0.456, 0.406] and meta["std"] == [0.229, 0.224, 0.225]
    assert meta["preprocess"] == {"interpolation": "bilinear", "crop_pct": 0.875}
