"""OFA-ProxylessNAS end to end through the registry: pipeline, model folder, ONNX, official configs and imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import FAST, known_call_ms, onnx_top1, perturb
from test_export import fake_data, ort_logits
from test_model_folder import REBUILD, ShortStandalone, card_snippet

from ofa import load_subnet
from ofa.cli import main
from ofa.data.datasets import build_data
from ofa.export.export import ExportConfig, export_subnet
from ofa.families.proxyless.arch import ProxylessArch
from ofa.families.proxyless.encoding import sample_arch
from ofa.families.proxyless.supernet import OFAProxylessNAS
from ofa.families.registry import load_supernet
from ofa.lut.build import TableBuildConfig, build_table
from ofa.pipeline import Pipeline, PipelineConfig
from ofa.train import load_recipe

TESTS = Path(__file__).resolve().parent
RECIPE = TESTS / "recipes" / "tiny_proxyless.yaml"
CHECKPOINT = TESTS / "fixtures" / "ofa_proxyless_w0.5_c10_random.pth"
EXPECTED = TESTS / "fixtures" / "ofa_proxyless_w0.5_c10_expected.pt"
SMALL = ("data.synthetic.train_size=80", "data.augment=none", "phases.full.epochs=1")  # a shorter pipeline run


# No training-curves PNG (tests/conftest.py `no_curves`): drawing it is a fair share of runs this small.
pytestmark = pytest.mark.usefixtures("no_curves")


@pytest.fixture(scope="module")
def net() -> OFAProxylessNAS:
    """A supernet of the tiny recipe's space with perturbed BN statistics (parity is not trivially met)."""
    return perturb(OFAProxylessNAS(load_recipe(RECIPE).space), seed=3).eval()


def test_pipeline_on_a_proxyless_recipe(tmp_path, monkeypatch):
    space = load_recipe(RECIPE).space
    table = tmp_path / "table.yaml"
    build_table(space, TableBuildConfig(table, protocol=FAST, calibrate=2, max_noise_pct=100.0, progress=False))
    known_call_ms(monkeypatch, 0.25)
    out = tmp_path / "run"
    cfg = PipelineConfig(RECIPE, out, SMALL, subnets=10, calib_batches=1, lut=table, targets_ms=(1e6,))
    result = Pipeline(cfg).run()
    assert result.ran[:4] == ["train", "collect", "fit", "search"] and len(result.ran) == 5
    assert isinstance(load_supernet(out / "supernet.pt"), OFAProxylessNAS)
    (row,) = result.rows
    assert row["test_top1"] == onnx_top1(row["onnx"], build_data(load_recipe(RECIPE, SMALL).data).test)
    assert row["predicted_ms"] <= 1e6 and row["macs"] > 0 and row["measured_ms"] == 0.25


def test_model_folder_rebuilds_with_timm_and_safetensors_alone(net, tmp_path, monkeypatch):
    arch = sample_arch(net.space, 4)
    out = tmp_path / "subnet"
    monkeypatch.setattr("ofa.lut.measure.Standalone", ShortStandalone)  # a short latency protocol
    export_subnet(
        net,
        arch,
        ExportConfig(out, calib_batches=2, batch_size=32, dynamic_batch=True),
        data=fake_data(net.space, size=8),
    )
    config = json.loads((out / "config.json").read_text())
    assert config["architecture"] == "proxylessnas_ofa_subnet" and "timm_efficientnet" in config
    x = torch.randn(3, 1, arch.resolution, arch.resolution, generator=torch.Generator().manual_seed(0))
    np.save(tmp_path / "x.npy", x.numpy())
    script = REBUILD.format(snippet=card_snippet((out / "README.md").read_text()))
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
        cwd=out,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    ours = load_subnet(out)
    assert ours.ofa_meta["arch"] == arch
    with torch.no_grad():
        expected = ours(x).numpy()
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), expected)
    assert np.abs(ort_logits(out / "model.onnx", x.numpy()) - expected).max() <= 1e-4


def test_export_takes_an_official_subnet_config_as_arch(net, tmp_path, capsys):
    supernet = net.save(tmp_path / "net.safetensors")
    official = {"ks": [5, 3, 5], "e": [3, 2, 3], "d": [2, 3], "r": 8}  # the last stage runs one block whatever d says
    (tmp_path / "official.json").write_text(json.dumps(official))
    onnx = tmp_path / "m.onnx"
    argv = ["--supernet", str(supernet), "--arch", str(tmp_path / "official.json"), "--out", str(onnx)]
    assert main(["export", *argv, "--no-latency"]) == 0
    arch = ProxylessArch.from_ofa_config(official)
    assert load_subnet(tmp_path / "m").ofa_meta["arch"] == arch and arch.depths == (2, 1)
    x = np.random.default_rng(0).standard_normal((1, 1, 8, 8)).astype(np.float32)
    with torch.no_grad():
        expected = net.extract(arch).eval()(torch.from_numpy(x)).numpy()
    assert np.abs(ort_logits(onnx, x) - expected).max() <= 1e-4
    capsys.readouterr()


def test_ofa_import_picks_proxyless_with_official_parity_to_onnx(tmp_path, capsys):
    out = tmp_path / "imported.safetensors"
    assert main(["import", str(CHECKPOINT), "--out", str(out)]) == 0
    assert "proxyless" in capsys.readouterr().out
    net = load_supernet(out).eval()
    assert isinstance(net, OFAProxylessNAS)
    expected = torch.load(EXPECTED, weights_only=True)
    for config, x, official in zip(expected["archs"], expected["inputs"], expected["logits"]):
        arch = ProxylessArch.from_ofa_config(config)
        net.set_active(arch)
        with torch.no_grad():
            assert (net(x) - official).abs().max() <= 1e-5, config
            assert (net.extract(arch).eval()(x) - official).abs().max() <= 1e-5, config
    config, x, official = expected["archs"][0], expected["inputs"][0], expected["logits"][0]
    arch = ProxylessArch.from_ofa_config(config)
    onnx = tmp_path / "official.onnx"
    export_subnet(net, arch, ExportConfig(onnx, calib_batches=0, latency=False), data=None)
    assert np.abs(ort_logits(onnx, x.numpy()) - official.numpy()).max() <= 1e-4


def test_bad_proxyless_checkpoints_are_one_line_cli_errors(tmp_path, capsys):
    state = torch.load(CHECKPOINT, weights_only=True)["state_dict"]
    key = "blocks.3.conv.point_linear.conv.conv.weight"
    cases = {
        "shape.pth": ({**state, key: torch.zeros(8, *state[key].shape[1:])}, "has shape [8, "),
        "missing.pth": ({k: v for k, v in state.items() if "blocks.2.conv.depth_conv.bn" not in k}, "missing key"),
        "blocks.pth": ({k: v for k, v in state.items() if not k.startswith("blocks.21.")}, "20 elastic blocks"),
    }
    for name, (bad, message) in cases.items():
        torch.save({"state_dict": bad}, tmp_path / name)
        rc = main(["import", str(tmp_path / name), "--out", str(tmp_path / "out.pt")])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc != 0 and len(err) == 1 and message in err[0] and name in err[0], (name, err)
        assert "Traceback" not in err[0]
    assert not (tmp_path / "out.pt").exists()


def test_openvino_export_runs_like_onnx(net, tmp_path):
    """OpenVINO only: ExecuTorch's lowering is slow and family-neutral (tests/test_edge_formats.py covers it)."""
    pytest.importorskip("openvino")
    from ofa.runtime import formats

    arch = sample_arch(net.space, 6)
    onnx = tmp_path / "m.onnx"
    result = export_subnet(net, arch, ExportConfig(onnx, calib_batches=0, latency=False, formats=("openvino",)))
    assert [f.format for f in result.formats] == ["openvino"]  # checked against PyTorch by the export
    x = np.random.default_rng(0).standard_normal((1, 1, arch.resolution, arch.resolution)).astype(np.float32)
    got = formats.load_infer("openvino", onnx.with_suffix(formats.SUFFIX["openvino"]), 1)(x)
    assert np.abs(got - ort_logits(onnx, x)).max() <= 1e-4
