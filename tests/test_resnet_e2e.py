"""OFA-ResNet end to end: the pipeline on a tiny recipe, model folders timm rebuilds, official subnet configs
as arch files, `ofa import` of the official fixture with parity, bad checkpoints, resume after a crash."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import FAST, known_call_ms, onnx_top1
from test_export import ort_logits
from test_model_folder import REBUILD, card_snippet

from ofa.cli import main
from ofa.data.datasets import build_data
from ofa.families.registry import load_supernet
from ofa.families.resnet.space import ResNetSpace
from ofa.families.resnet.supernet import OFAResNet
from ofa.lut.build import TableBuildConfig, build_table
from ofa.pipeline import Pipeline, PipelineConfig
from ofa.runtime.convert import export_onnx
from ofa.train import load_recipe, train
from ofa.train.checkpoint import CheckpointStore

TESTS = Path(__file__).resolve().parent
RECIPE = TESTS / "recipes" / "tiny_resnet.yaml"
CHECKPOINT = TESTS / "fixtures" / "ofa_resnet50_w0.1-0.15-0.2_c10_random.pth"
EXPECTED = TESTS / "fixtures" / "ofa_resnet50_w0.1-0.15-0.2_c10_expected.pt"
# The pipeline's training run is also the crash test's uninterrupted reference (its checkpoints every 2 steps
# of the recipe's 4 x 6 give that test places to crash at).
TRAIN = ("checkpoint.every_steps=2",)


# No training-curves PNG (tests/conftest.py `no_curves`): drawing it is a fair share of runs this small.
pytestmark = pytest.mark.usefixtures("no_curves")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, list[dict]]:
    """`ofa pipeline` of the tiny resnet recipe (every timed call reads 0.25 ms), trained with ``TRAIN``."""
    tmp = tmp_path_factory.mktemp("resnet_pipeline")
    table = tmp / "table.yaml"
    build_table(load_recipe(RECIPE).space, TableBuildConfig(table, protocol=FAST, calibrate=2, max_noise_pct=100.0))
    with pytest.MonkeyPatch.context() as mp:
        known_call_ms(mp, 0.25)
        cfg = PipelineConfig(RECIPE, tmp / "run", TRAIN, subnets=10, calib_batches=1, lut=table)
        result = Pipeline(cfg, log=lambda _: None)
        result = result.run()
    assert result.ran[:4] == ["train", "collect", "fit", "search"]
    assert len(result.ran) == 4 + len({r["arch"] for r in result.rows})  # one export per distinct subnet
    return tmp / "run", result.rows


def test_pipeline_runs_every_stage_for_a_resnet(run):
    out, rows = run
    assert isinstance(load_supernet(out / "supernet.pt"), OFAResNet)
    assert len(rows) == 4 and [r["target_ms"] for r in rows] == sorted(r["target_ms"] for r in rows)
    test_images = build_data(load_recipe(RECIPE, TRAIN).data).test
    for r in rows:
        assert r["arch"].startswith("r") and r["macs"] > 0 and r["predicted_ms"] <= r["target_ms"] + 1e-9
        assert r["test_top1"] == onnx_top1(r["onnx"], test_images)


def test_official_config_exports_a_folder_timm_rebuilds(run, tmp_path, capsys, monkeypatch):
    """An official ``{"d", "e", "w", "r"}`` config is an arch file (here with the stem block skipped); the model
    folder's card lines rebuild the subnet with timm + safetensors alone, logit for logit."""
    out, _ = run
    space = load_supernet(out / "supernet.pt").space
    arch = space.max_arch(8)
    official = {**arch.to_ofa_config(), "d": [0, *arch.depths[1:]]}  # d[0] below the largest: no stem block
    (tmp_path / "official.json").write_text(json.dumps(official))
    folder = tmp_path / "subnet"
    args = ["--supernet", str(out / "supernet.pt"), "--arch", str(tmp_path / "official.json"), "--out", str(folder)]
    known_call_ms(monkeypatch, 0.25)  # the export's latency is not what this test is about: no second of burn-in
    assert main(["export", *args, "--calib-batches", "1"]) == 0, capsys.readouterr().err
    config = json.loads((folder / "config.json").read_text())
    assert config["timm_byobnet"]["stem_residual"] is False and config["num_features"] == max(space.stage_choices(1))
    assert config["ofa"]["arch"]["depths"][0] == min(space.depths)

    x = torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    np.save(tmp_path / "x.npy", x.numpy())
    script = REBUILD.format(snippet=card_snippet((folder / "README.md").read_text()))
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
        cwd=folder,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    from ofa import load_subnet

    with torch.no_grad():
        expected = load_subnet(folder)(x).numpy()
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), expected)
    assert np.abs(ort_logits(folder / "model.onnx", x[:1].numpy()) - expected[:1]).max() <= 1e-4  # batch 1 export


def test_official_stem_depths_below_the_largest_are_the_skip():
    """The official code skips the stem block for any ``d[0]`` below its largest depth; so does our arch."""
    space = ResNetSpace.ofa_resnet50()
    config = {**space.max_arch(128).to_ofa_config(), "d": [1, 2, 2, 2, 2]}
    arch = space.validate(space.official_arch(config))
    assert arch.depths == (0, 2, 2, 2, 2) and not space.stem_block_runs(arch)
    assert space.official_arch({**config, "d": [2, 2, 2, 2, 2]}) == space.max_arch(128)


def test_import_cli_picks_resnet_with_official_parity(tmp_path, capsys):
    out = tmp_path / "imported.pt"
    assert main(["import", str(CHECKPOINT), "--widths", "0.1,0.15,0.2", "--out", str(out)]) == 0
    assert "resnet: depths [0, 1, 2], expands [0.2, 0.25, 0.35], widths [0, 1, 2]" in capsys.readouterr().out
    net = load_supernet(out).eval()
    assert isinstance(net, OFAResNet) and net.space.widths == (0.1, 0.15, 0.2)
    expected = torch.load(EXPECTED, weights_only=True)
    for i, (config, x, logits) in enumerate(zip(expected["archs"], expected["inputs"], expected["logits"])):
        arch = net.set_active(net.space.official_arch(config))
        sub = net.extract(arch).eval()
        with torch.no_grad():
            assert (net(x) - logits).abs().max() <= 1e-5 and (sub(x) - logits).abs().max() <= 1e-5
        if i == 0:
            onnx = tmp_path / "sub.onnx"
            onnx.write_bytes(export_onnx(sub, tuple(x.shape)))
            assert np.abs(ort_logits(onnx, x.numpy()) - logits.numpy()).max() <= 1e-4


def _saved(tmp_path: Path, state: dict) -> Path:
    path = tmp_path / "bad.pth"
    torch.save({"state_dict": state}, path)
    return path


@pytest.mark.parametrize(
    ("change", "flags", "message"),
    [
        (lambda s: s.pop("blocks.3.conv2.bn.bn.running_var"), ["--widths", "0.1,0.15,0.2"], "missing key"),
        (lambda s: None, [], r"are not \[.*\] of the largest of widths \[0.65, 0.8, 1.0\]; set .*--widths$"),
        (lambda s: None, ["--widths", "0.1,0.15,0.2", "--expands", "0.2,0.3"], "largest of expands .*--expands$"),
        (lambda s: None, ["--widths", "0.1,0.15,0.2", "--depths", "0,1"], "the largest must be 2"),
        (
            lambda s: [s.pop(k) for k in list(s) if k.startswith("blocks.17.")],
            ["--widths", "0.1,0.15,0.2"],
            "per stage",
        ),
    ],
)
def test_bad_resnet_checkpoints_are_one_line_each(tmp_path, capsys, change, flags, message):
    state = torch.load(CHECKPOINT, weights_only=True)["state_dict"]
    change(state)
    assert main(["import", str(_saved(tmp_path, state)), *flags, "--out", str(tmp_path / "x.pt")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("ofa import: error: ")
    assert re.search(message, err), err


class Crash(Exception):
    """Raised right after a checkpoint is written, as a crash there would end the run."""


def test_crash_then_resume_is_bitwise_for_resnet(run, tmp_path, monkeypatch, capsys):
    """Widths and channel reorganisation take the resnet path: a run that dies right after a random checkpoint
    and is resumed ends on the uninterrupted run's weights (the pipeline's training, `train` of the same recipe
    and overrides). In-process: the resumed run must restore every random state itself; tests/test_resume.py
    SIGKILLs real processes at any moment."""
    overrides = list(TRAIN)
    reference = run[0] / "supernet.pt"
    out = tmp_path / "run"
    crash_after = random.randint(2, 4 * 6 - 8)  # 4 epochs of 6 steps
    save = CheckpointStore.save

    def save_then_crash(store: CheckpointStore, state: dict) -> Path:
        path = save(store, state)
        if state["global_step"] >= crash_after:
            raise Crash
        return path

    with monkeypatch.context() as patched:
        patched.setattr(CheckpointStore, "save", save_then_crash)
        with pytest.raises(Crash):
            train(load_recipe(RECIPE, overrides), out)
    torch.manual_seed(12345)  # whatever the crash left behind
    random.seed(12345)
    np.random.seed(12345)
    capsys.readouterr()
    resumed = train(load_recipe(RECIPE, overrides), out, resume=True)
    step = int(re.search(r"resuming from \S+step-(\d+)\.pt", capsys.readouterr().out).group(1))
    assert step >= crash_after  # it went on from the crash, not from scratch
    ref, got = (torch.load(p, weights_only=True)["state_dict"] for p in (reference, resumed))
    assert ref.keys() == got.keys()
    different = [k for k in ref if not torch.equal(ref[k], got[k])]
    assert not different, f"crashed after step >= {crash_after}: {different[:5]} differ"
